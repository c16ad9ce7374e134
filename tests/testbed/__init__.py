"""Real-peer testbed: etcd, Kubernetes control plane, kwok, Gitea and a runner as local processes."""

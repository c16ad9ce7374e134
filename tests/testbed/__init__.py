"""Real-peer testbed: etcd, Kubernetes, kwok, Gitea and a runner as local processes."""

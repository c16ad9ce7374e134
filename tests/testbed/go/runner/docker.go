package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nektos/act/pkg/container"
	log "github.com/sirupsen/logrus"
)

// checkDocker asks the docker daemon act will use (DOCKER_HOST and the TLS
// variables from the environment, or container.docker_host) for its info
// within container.docker_timeout. With container.require_docker a failure
// stops the daemon; otherwise it is logged when a docker label may need it.
func checkDocker(cfg *Config, labels []Label) error {
	needed := cfg.Container.RequireDocker
	for _, l := range labels {
		needed = needed || l.Schema == "docker"
	}
	if !needed || cfg.Container.DockerHost == "-" && !cfg.Container.RequireDocker {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Container.DockerTimeout)
	defer cancel()
	info, err := container.GetHostInfo(ctx)
	if err != nil {
		if cfg.Container.RequireDocker {
			return fmt.Errorf("container.require_docker is set and the docker daemon does not answer: %w", err)
		}
		log.WithError(err).Warn("the docker daemon does not answer; jobs on docker labels and container jobs will fail")
		return nil
	}
	log.Infof("docker daemon: %s %s (%s)", info.Name, info.ServerVersion, info.OperatingSystem)
	return nil
}

// dockerHost is the daemon act uses: container.docker_host ("-": none is
// mounted into job containers), else DOCKER_HOST, else the first socket found
// in the usual places (rootful, then rootless). It also sets DOCKER_HOST for
// act's docker client when it found a socket itself.
func dockerHost(cfg *Config) string {
	if h := cfg.Container.DockerHost; h != "" {
		return h
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	candidates := []string{"/var/run/docker.sock"}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		candidates = append(candidates, filepath.Join(d, "docker.sock"))
	}
	candidates = append(candidates, fmt.Sprintf("/run/user/%d/docker.sock", os.Getuid()))
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, ".docker", "run", "docker.sock"))
	}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && fi.Mode()&os.ModeSocket != 0 {
			h := "unix://" + c
			_ = os.Setenv("DOCKER_HOST", h)
			return h
		}
	}
	return ""
}

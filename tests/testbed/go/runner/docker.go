package main

import (
	"context"
	"fmt"

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

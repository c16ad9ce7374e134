package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nektos/act/pkg/container"
	log "github.com/sirupsen/logrus"
)

// socketCandidates are the usual docker (or podman) sockets, rootful then rootless.
var socketCandidates = []string{
	"/var/run/docker.sock",
	"/run/podman/podman.sock",
	"$HOME/.colima/docker.sock",
	"$XDG_RUNTIME_DIR/docker.sock",
	"$XDG_RUNTIME_DIR/podman/podman.sock",
	"$HOME/.docker/run/docker.sock",
}

// findDockerHost: container.docker_host unless empty or "-", else DOCKER_HOST,
// else the first usual socket that exists.
func findDockerHost(configured string) (string, error) {
	if configured != "" && configured != "-" {
		return configured, nil
	}
	if h, ok := os.LookupEnv("DOCKER_HOST"); ok {
		return h, nil
	}
	for _, p := range socketCandidates {
		if p = os.ExpandEnv(p); !strings.HasPrefix(p, "/") {
			continue // an unset variable
		}
		if _, err := os.Lstat(p); err == nil {
			return "unix://" + p, nil
		}
	}
	return "", errors.New("no docker daemon socket found and container.docker_host is not set")
}

func dockerAnswers(ctx context.Context) error {
	_, err := container.GetHostInfo(ctx)
	return err
}

// prepareDocker returns act's ContainerDaemonSocket (the daemon mounted into job
// containers as /var/run/docker.sock; "-" for none, "" for act's default).
//
// Like v1.0.8: when docker is needed (container.require_docker, or a
// docker:// label) the daemon is found (see findDockerHost), waited for up to
// container.docker_timeout, and must answer, else the daemon does not start;
// DOCKER_HOST is then set to it for act's docker client (which also reads
// DOCKER_TLS_VERIFY and DOCKER_CERT_PATH). A daemon reached over anything but
// a unix socket (e.g. tcp://localhost:2376 of a DinD sidecar) cannot be
// mounted into job containers, so none is. Otherwise container.docker_host is
// passed on as it is.
func prepareDocker(cfg *Config, labels []Label) (string, error) {
	needed := cfg.Container.RequireDocker
	for _, l := range labels {
		needed = needed || l.Schema == "docker"
	}
	socket := cfg.Container.DockerHost
	if !needed {
		if socket != "" && socket != "-" {
			_ = os.Setenv("DOCKER_HOST", socket)
		}
		return socket, nil
	}
	host, err := findDockerHost(socket)
	if err != nil {
		return "", err
	}
	_ = os.Setenv("DOCKER_HOST", host)
	if t := cfg.Container.DockerTimeout; t > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), t)
		for dockerAnswers(ctx) != nil && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dockerAnswers(ctx); err != nil {
		return "", fmt.Errorf("the docker daemon at %s does not answer: %w", host, err)
	}
	log.Infof("docker daemon at %s is ready", host)
	if socket == "" {
		socket = host
	}
	if scheme, _, found := strings.Cut(socket, "://"); found && !strings.EqualFold(scheme, "unix") {
		socket = "-"
	}
	return socket, nil
}

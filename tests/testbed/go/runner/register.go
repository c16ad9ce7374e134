package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	pingv1 "code.gitea.io/actions-proto-go/ping/v1"
	runnerv1 "code.gitea.io/actions-proto-go/runner/v1"
	"connectrpc.com/connect"
	log "github.com/sirupsen/logrus"
)

// defaultLabels are used when neither the config nor --labels names any.
var defaultLabels = []string{"linux:host"}

func registerCmd(args []string) error {
	fs := flag.NewFlagSet("register", flag.ContinueOnError)
	fs.Bool("no-interactive", false, "always non-interactive (accepted for compatibility)")
	ephemeral := fs.Bool("ephemeral", false, "take one task; Gitea removes the runner afterwards")
	instance := fs.String("instance", "", "Gitea instance URL")
	token := fs.String("token", "", "registration token")
	name := fs.String("name", "", "runner name (default: host name)")
	labelsFlag := fs.String("labels", "", "comma-separated labels: name, name:host or name:docker://image")
	configFile := fs.String("config", "", "config file")
	fs.StringVar(configFile, "c", "", "config file (short)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := LoadConfig(*configFile)
	if err != nil {
		return err
	}
	setLogLevel(cfg.Log.Level)
	if *instance == "" || *token == "" {
		return errors.New("--instance and --token are required")
	}
	if *name == "" {
		*name, _ = os.Hostname()
	}
	labels := SplitLabels(*labelsFlag)
	if len(cfg.Runner.Labels) > 0 {
		if len(labels) > 0 {
			log.Warn("Labels from command will be ignored, use labels defined in config file.")
		}
		labels = cfg.Runner.Labels
	}
	if len(labels) == 0 {
		labels = defaultLabels
	}
	parsed, err := ParseLabels(labels)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cli := NewClient(*instance, cfg.Runner.Insecure, "", "")
	// Like the official runner: wait for Gitea to answer a ping, retrying every second.
	for {
		_, err := cli.Ping.Ping(ctx, connect.NewRequest(&pingv1.PingRequest{Data: *name}))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return errors.New("interrupted while waiting for the Gitea instance")
		}
		log.WithError(err).Error("cannot ping the Gitea instance, retrying in 1s")
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	resp, err := cli.Register(ctx, connect.NewRequest(&runnerv1.RegisterRequest{
		Name:      *name,
		Token:     *token,
		Version:   Version,
		Labels:    Names(parsed),
		Ephemeral: *ephemeral,
	}))
	if err != nil {
		return fmt.Errorf("failed to register runner: %w", err)
	}
	r := resp.Msg.GetRunner()
	reg := &Registration{
		ID: r.GetId(), UUID: r.GetUuid(), Name: r.GetName(), Token: r.GetToken(),
		Address: *instance, Labels: labels, Ephemeral: *ephemeral,
	}
	if err := SaveRegistration(cfg.Runner.File, reg); err != nil {
		return fmt.Errorf("failed to save registration file: %w", err)
	}
	log.Info("Runner registered successfully.")
	return nil
}

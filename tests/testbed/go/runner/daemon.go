package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	runnerv1 "code.gitea.io/actions-proto-go/runner/v1"
	"connectrpc.com/connect"
	log "github.com/sirupsen/logrus"
)

func daemonCmd(args []string) error {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	configFile := fs.String("config", "", "config file")
	fs.StringVar(configFile, "c", "", "config file (short)")
	once := fs.Bool("once", false, "take one task, then exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// From here on SIGINT/SIGTERM end the daemon with exit code 0 (see Run).
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	cfg, err := LoadConfig(*configFile)
	if err != nil {
		return err
	}
	setLogLevel(cfg.Log.Level)
	reg, err := LoadRegistration(cfg.Runner.File)
	if err != nil {
		return err
	}
	labelStrs := reg.Labels
	if len(cfg.Runner.Labels) > 0 {
		labelStrs = cfg.Runner.Labels
	}
	labels, err := ParseLabels(labelStrs)
	if err != nil {
		return err
	}
	daemonSocket, err := prepareDocker(cfg, labels)
	if err != nil {
		return err
	}

	cli := NewClient(reg.Address, cfg.Runner.Insecure, reg.UUID, reg.Token)
	d := &Daemon{cfg: cfg, cli: cli, once: *once || reg.Ephemeral,
		tasks: &TaskRunner{cfg: cfg, reg: reg, labels: labels, daemonSocket: daemonSocket}}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err = cli.Declare(ctx, connect.NewRequest(&runnerv1.DeclareRequest{Version: Version, Labels: Names(labels)}))
	cancel()
	if err != nil && connect.CodeOf(err) == connect.CodeUnimplemented {
		log.Warn("this Gitea does not support declaring labels; the labels given at registration apply")
	} else if err != nil {
		return err
	}
	log.Infof("runner: %s, with version: %s, with labels: %v, declare successfully", reg.Name, Version, Names(labels))

	if s := cfg.Cache.ExternalServer; s != "" {
		d.tasks.cache = NewCacheClient(s, cfg.Cache.ExternalSecret)
	} else if *cfg.Cache.Enabled {
		local, err := StartLocalCache(cfg)
		if err != nil {
			log.WithError(err).Error("cannot start the cache server; jobs run without a cache")
		} else {
			defer local.Close()
			d.tasks.cache = local
		}
	}
	return d.Run(sig)
}

// Daemon polls Gitea for tasks and runs them, up to runner.capacity at once.
type Daemon struct {
	cfg   *Config
	cli   *Client
	once  bool // ephemeral or --once: one task, then exit
	tasks *TaskRunner

	mu      sync.Mutex
	running map[int64]context.CancelFunc
}

// Run polls until a signal on sig (or, with once, until its task has ended).
func (d *Daemon) Run(sig <-chan os.Signal) error {
	d.running = map[int64]context.CancelFunc{}
	shutdown := make(chan struct{})
	pollCtx, stopPolling := context.WithCancel(context.Background())
	defer stopPolling()
	go func() {
		s := <-sig
		log.Infof("received %s, shutdown initiated", s)
		close(shutdown)
		stopPolling()
		for range sig { // later signals change nothing
		}
	}()

	capacity := d.cfg.Runner.Capacity
	if d.once {
		capacity = 1
	}
	slots := make(chan struct{}, capacity)
	var wg sync.WaitGroup
	var version int64
	interval := d.cfg.Runner.FetchInterval
	sleep := func() {
		select {
		case <-pollCtx.Done():
		case <-time.After(interval):
		}
	}
poll:
	for pollCtx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-pollCtx.Done():
			break poll
		}
		// A fetch under way is not cut short by a signal: Gitea may already have
		// assigned the task, which would then be lost. A task it returns runs.
		task, err := d.fetch(context.Background(), &version)
		if task == nil && pollCtx.Err() != nil {
			<-slots
			break
		}
		if err != nil {
			<-slots
			log.WithError(err).Error("failed to fetch task")
			sleep()
			continue
		}
		if task == nil {
			<-slots
			sleep()
			if interval *= 2; interval > d.cfg.Runner.FetchIntervalMax {
				interval = d.cfg.Runner.FetchIntervalMax
			}
			continue
		}
		interval = d.cfg.Runner.FetchInterval
		d.startTask(task, &wg, func() { <-slots })
		if d.once {
			break
		}
		sleep()
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		select {
		case <-shutdown:
		default:
			log.Info("the runner took its one task (ephemeral or --once) and exits")
		}
		return nil
	case <-shutdown:
	}
	if d.busy() == 0 {
		return nil
	}
	// Shutdown while a job runs. Like v1.0.8, the job is not stopped when
	// runner.shutdown_timeout is 0 (the default): it runs to its end and its real
	// result is reported. Only a positive shutdown_timeout that expires cancels
	// the running jobs (reported as cancelled).
	if t := d.cfg.Runner.ShutdownTimeout; t > 0 {
		select {
		case <-done:
			log.Info("in progress jobs finished within runner.shutdown_timeout")
			return nil
		case <-time.After(t):
			log.Warnf("runner.shutdown_timeout (%s) expired, cancelling in progress jobs", t)
			d.cancelAll()
		}
	}
	<-done
	log.Info("cancelled in progress jobs during shutdown")
	return nil
}

func (d *Daemon) fetch(ctx context.Context, version *int64) (*runnerv1.Task, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Runner.FetchTimeout)
	defer cancel()
	resp, err := d.cli.FetchTask(ctx, connect.NewRequest(&runnerv1.FetchTaskRequest{TasksVersion: *version}))
	if err != nil {
		return nil, err
	}
	if v := resp.Msg.GetTasksVersion(); v > *version {
		*version = v
	}
	task := resp.Msg.GetTask()
	if task != nil {
		*version = 0 // ask for a full pick next time: more tasks may be waiting
	}
	return task, nil
}

// startTask counts the task as running at once (shutdown looks at that) and
// runs it in the background.
func (d *Daemon) startTask(task *runnerv1.Task, wg *sync.WaitGroup, done func()) {
	// The job's context is not the daemon's: a signal does not cancel it (see Run).
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Runner.Timeout)
	d.mu.Lock()
	d.running[task.GetId()] = cancel
	d.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer done()
		defer cancel()
		d.runTask(ctx, cancel, task)
	}()
}

func (d *Daemon) runTask(ctx context.Context, cancel context.CancelFunc, task *runnerv1.Task) {
	defer func() {
		d.mu.Lock()
		delete(d.running, task.GetId())
		d.mu.Unlock()
	}()
	log.Infof("task %d: started", task.GetId())
	d.tasks.Run(ctx, cancel, d.cli, task)
	log.Infof("task %d: finished", task.GetId())
}

func (d *Daemon) busy() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.running)
}

func (d *Daemon) cancelAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, cancel := range d.running {
		cancel()
	}
}

// Command gro-testbed-runner is a small stand-in for Gitea's act_runner, written for
// this project's testbed. It exists because gitea.com/gitea/runner and
// gitea.com/gitea/act_runner could not be fetched through the Go module proxy from
// the project's machines (403 "This module version is not available").
//
// It speaks the same runner protocol (code.gitea.io/actions-proto-go over Connect)
// to a real Gitea and mirrors act_runner's command line so the kubelet harness can
// run either binary:
//
//	gro-testbed-runner register --no-interactive [--ephemeral] --instance URL --token T --name N --labels a:host,b
//	gro-testbed-runner daemon [--once]
//
// Only host mode is implemented: each `run:` step is executed with bash on the host.
// Only simple expressions are substituted (${{ github.X }}, secrets, vars, env,
// needs.J.outputs.X / needs.J.result; anything else becomes ""); `if:`, `uses:`
// steps, matrices, containers and services are NOT supported; a `uses:` step is
// logged and skipped. Good enough to prove pickup, reporting and
// ephemeral clean-up against a real Gitea; not a runner for real workloads.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	runnerv1 "code.gitea.io/actions-proto-go/runner/v1"
	"code.gitea.io/actions-proto-go/runner/v1/runnerv1connect"
	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"
	"gopkg.in/yaml.v3"
)

const version = "gro-testbed-runner-0.1"

// registration is what `register` stores in .runner and `daemon` reads back.
type registration struct {
	ID        int64    `json:"id"`
	UUID      string   `json:"uuid"`
	Name      string   `json:"name"`
	Token     string   `json:"token"`
	Address   string   `json:"address"`
	Labels    []string `json:"labels"`
	Ephemeral bool     `json:"ephemeral"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gro-testbed-runner register|daemon|--version [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "register":
		err = register(os.Args[2:])
	case "daemon":
		err = daemon(os.Args[2:])
	case "--version", "-v", "version":
		fmt.Println(version)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// labelName strips act_runner's schema suffix: "ubuntu:host" -> "ubuntu",
// "x:docker://img" -> "x". A colon not followed by a known schema stays in the name.
func labelName(label string) string {
	for _, schema := range []string{":host", ":docker://", ":kubernetes://", ":lxc://"} {
		if i := strings.Index(label, schema); i > 0 && (schema != ":host" || strings.HasSuffix(label, ":host")) {
			return label[:i]
		}
	}
	return label
}

func client(address string, reg *registration) runnerv1connect.RunnerServiceClient {
	opts := []connect.ClientOption{}
	if reg != nil {
		opts = append(opts, connect.WithInterceptors(connect.UnaryInterceptorFunc(
			func(next connect.UnaryFunc) connect.UnaryFunc {
				return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
					req.Header().Set("x-runner-uuid", reg.UUID)
					req.Header().Set("x-runner-token", reg.Token)
					return next(ctx, req)
				}
			})))
	}
	base := strings.TrimSuffix(address, "/") + "/api/actions"
	return runnerv1connect.NewRunnerServiceClient(&http.Client{Timeout: 60 * time.Second}, base, opts...)
}

func register(args []string) error {
	fs := flag.NewFlagSet("register", flag.ExitOnError)
	fs.Bool("no-interactive", false, "accepted for act_runner compatibility (always non-interactive)")
	ephemeral := fs.Bool("ephemeral", false, "take one task, then the server deletes the runner")
	instance := fs.String("instance", "", "Gitea URL")
	token := fs.String("token", "", "registration token")
	name := fs.String("name", "", "runner name")
	labels := fs.String("labels", "", "comma-separated labels (name or name:host)")
	fs.String("config", "", "accepted for act_runner compatibility (ignored)")
	file := fs.String("file", ".runner", "where to store the registration")
	_ = fs.Parse(args)
	if *instance == "" || *token == "" {
		return errors.New("--instance and --token are required")
	}
	if *name == "" {
		*name, _ = os.Hostname()
	}
	var ls []string
	for _, l := range strings.Split(*labels, ",") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	var names []string
	for _, l := range ls {
		names = append(names, labelName(l))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := client(*instance, nil).Register(ctx, connect.NewRequest(&runnerv1.RegisterRequest{
		Name: *name, Token: *token, Version: version, Labels: names, Ephemeral: *ephemeral,
	}))
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	r := resp.Msg.GetRunner()
	reg := registration{ID: r.GetId(), UUID: r.GetUuid(), Name: r.GetName(), Token: r.GetToken(),
		Address: *instance, Labels: ls, Ephemeral: *ephemeral}
	b, _ := json.MarshalIndent(reg, "", "  ")
	if err := os.WriteFile(*file, b, 0o600); err != nil {
		return err
	}
	fmt.Printf("registered runner id=%d name=%s labels=%v ephemeral=%v\n", reg.ID, reg.Name, names, reg.Ephemeral)
	return nil
}

func daemon(args []string) error {
	fs := flag.NewFlagSet("daemon", flag.ExitOnError)
	once := fs.Bool("once", false, "exit after one task")
	fs.String("config", "", "accepted for act_runner compatibility (ignored; there is no cache server)")
	file := fs.String("file", ".runner", "registration file written by register")
	poll := fs.Duration("poll", 2*time.Second, "FetchTask interval")
	_ = fs.Parse(args)
	raw, err := os.ReadFile(*file)
	if err != nil {
		return fmt.Errorf("read registration: %w", err)
	}
	var reg registration
	if err := json.Unmarshal(raw, &reg); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cli := client(reg.Address, &reg)
	var names []string
	for _, l := range reg.Labels {
		names = append(names, labelName(l))
	}
	if _, err := cli.Declare(ctx, connect.NewRequest(&runnerv1.DeclareRequest{Version: version, Labels: names})); err != nil {
		if connect.CodeOf(err) == connect.CodeUnauthenticated && reg.Ephemeral {
			fmt.Println("runner registration no longer exists; ephemeral runner exits")
			return nil
		}
		return fmt.Errorf("declare: %w", err)
	}
	fmt.Printf("runner %s (id %d) polling %s for labels %v\n", reg.Name, reg.ID, reg.Address, names)
	var tasksVersion int64
	for {
		select {
		case <-ctx.Done():
			fmt.Println("signal received; exiting")
			return nil
		default:
		}
		resp, err := cli.FetchTask(ctx, connect.NewRequest(&runnerv1.FetchTaskRequest{TasksVersion: tasksVersion}))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if connect.CodeOf(err) == connect.CodeUnauthenticated {
				if reg.Ephemeral {
					fmt.Println("runner registration was removed; ephemeral runner exits")
					return nil
				}
				return fmt.Errorf("fetch task: %w", err)
			}
			fmt.Fprintln(os.Stderr, "fetch task:", err)
		} else {
			tasksVersion = resp.Msg.GetTasksVersion()
			if t := resp.Msg.GetTask(); t != nil {
				runTask(ctx, cli, t)
				if reg.Ephemeral || *once {
					fmt.Println("task done; exiting (ephemeral/once)")
					return nil
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(*poll):
		}
	}
}

// step is the subset of a workflow step this stand-in understands.
type step struct {
	ID               string            `yaml:"id"`
	Name             string            `yaml:"name"`
	Run              string            `yaml:"run"`
	Uses             string            `yaml:"uses"`
	Shell            string            `yaml:"shell"`
	Env              map[string]string `yaml:"env"`
	WorkingDirectory string            `yaml:"working-directory"`
	ContinueOnError  bool              `yaml:"continue-on-error"`
}

type job struct {
	Name  string            `yaml:"name"`
	Env   map[string]string `yaml:"env"`
	Steps []step            `yaml:"steps"`
}

type workflow struct {
	Env  map[string]string `yaml:"env"`
	Jobs map[string]job    `yaml:"jobs"`
}

// logger collects log rows; they are sent to Gitea as the task's log.
type logger struct {
	mu      sync.Mutex
	rows    []*runnerv1.LogRow
	secrets []string // masked as *** in every line, as act_runner does
}

func (l *logger) add(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	for _, sec := range l.secrets {
		if sec != "" {
			line = strings.ReplaceAll(line, sec, "***")
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows = append(l.rows, &runnerv1.LogRow{Time: timestamppb.Now(), Content: line})
	fmt.Println(line)
}

func (l *logger) len() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.rows))
}

func taskEnv(t *runnerv1.Task, workspace string) []string {
	env := map[string]string{
		"CI": "true", "GITHUB_ACTIONS": "true", "GITEA_ACTIONS": "true",
		"GITHUB_WORKSPACE": workspace, "RUNNER_TEMP": filepath.Join(workspace, ".tmp"),
	}
	if c := t.GetContext(); c != nil {
		m := c.AsMap()
		for _, k := range []string{"repository", "repository_owner", "sha", "ref", "ref_name", "run_id",
			"run_number", "run_attempt", "server_url", "api_url", "event_name", "actor", "workflow", "job"} {
			if v, ok := m[k]; ok && v != nil {
				env["GITHUB_"+strings.ToUpper(k)] = fmt.Sprint(v)
			}
		}
	}
	for k, v := range t.GetVars() {
		env["VARS_"+k] = v
	}
	out := os.Environ()
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

func mergeEnv(base []string, maps ...map[string]string) []string {
	out := append([]string{}, base...)
	for _, m := range maps {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, k+"="+m[k])
		}
	}
	return out
}

func runTask(ctx context.Context, cli runnerv1connect.RunnerServiceClient, t *runnerv1.Task) {
	log := &logger{}
	for _, v := range t.GetSecrets() {
		log.secrets = append(log.secrets, v)
	}
	started := timestamppb.Now()
	state := &runnerv1.TaskState{Id: t.GetId(), StartedAt: started}
	_, _ = cli.UpdateTask(ctx, connect.NewRequest(&runnerv1.UpdateTaskRequest{State: state}))

	var wf workflow
	result := runnerv1.Result_RESULT_SUCCESS
	if err := yaml.Unmarshal(t.GetWorkflowPayload(), &wf); err != nil || len(wf.Jobs) != 1 {
		log.add("cannot parse workflow payload (%v, %d jobs)", err, len(wf.Jobs))
		result = runnerv1.Result_RESULT_FAILURE
	}
	var j job
	for _, v := range wf.Jobs {
		j = v
	}
	workspace, err := os.MkdirTemp("", fmt.Sprintf("task-%d-", t.GetId()))
	if err != nil {
		log.add("workspace: %v", err)
		result = runnerv1.Result_RESULT_FAILURE
	} else {
		defer os.RemoveAll(workspace)
		_ = os.MkdirAll(filepath.Join(workspace, ".tmp"), 0o755)
	}
	base := taskEnv(t, workspace)
	log.add("gro-testbed-runner: task %d, job %q, %d steps (host mode)", t.GetId(), j.Name, len(j.Steps))

	heartbeat, stopHB := context.WithCancel(ctx)
	go func() { // keep the task alive in Gitea's eyes while steps run
		for {
			select {
			case <-heartbeat.Done():
				return
			case <-time.After(10 * time.Second):
				_, _ = cli.UpdateTask(ctx, connect.NewRequest(&runnerv1.UpdateTaskRequest{State: state}))
			}
		}
	}()

	steps := make([]*runnerv1.StepState, len(j.Steps))
	for i, s := range j.Steps {
		st := &runnerv1.StepState{Id: int64(i), StartedAt: timestamppb.Now(), LogIndex: log.len()}
		steps[i] = st
		title := s.Name
		if title == "" {
			title = strings.SplitN(strings.TrimSpace(s.Run+s.Uses), "\n", 2)[0]
		}
		if result != runnerv1.Result_RESULT_SUCCESS {
			st.Result = runnerv1.Result_RESULT_SKIPPED
		} else if s.Run == "" {
			log.add("step %d %q: 'uses:' is not supported by the stand-in runner; skipped", i, title)
			st.Result = runnerv1.Result_RESULT_SKIPPED
		} else {
			log.add("step %d: %s", i, title)
			env := map[string]string{}
			for _, m := range []map[string]string{wf.Env, j.Env, s.Env} {
				for k, v := range m {
					env[k] = v
				}
			}
			for k, v := range env {
				env[k] = expand(v, t, env)
			}
			s.Run = expand(s.Run, t, env)
			st.Result = runStep(ctx, log, s, mergeEnv(base, env), workspace)
			if st.Result == runnerv1.Result_RESULT_FAILURE && !s.ContinueOnError {
				result = runnerv1.Result_RESULT_FAILURE
			}
		}
		st.StoppedAt = timestamppb.Now()
		st.LogLength = log.len() - st.LogIndex
	}
	stopHB()
	log.add("job finished: %s", result)

	log.mu.Lock()
	rows := log.rows
	log.mu.Unlock()
	if _, err := cli.UpdateLog(ctx, connect.NewRequest(&runnerv1.UpdateLogRequest{
		TaskId: t.GetId(), Index: 0, Rows: rows, NoMore: true,
	})); err != nil {
		fmt.Fprintln(os.Stderr, "update log:", err)
	}
	state.Result = result
	state.StoppedAt = timestamppb.Now()
	state.Steps = steps
	for attempt := 0; attempt < 5; attempt++ {
		if _, err = cli.UpdateTask(ctx, connect.NewRequest(&runnerv1.UpdateTaskRequest{State: state})); err == nil {
			return
		}
		fmt.Fprintln(os.Stderr, "update task:", err)
		time.Sleep(time.Second)
	}
}

var exprRe = regexp.MustCompile(`\$\{\{\s*([A-Za-z0-9_.\-]+)\s*\}\}`)

// expand substitutes the simple expressions this stand-in understands:
// ${{ github.X }}, ${{ secrets.X }}, ${{ vars.X }}, ${{ env.X }},
// ${{ needs.J.outputs.X }} and ${{ needs.J.result }}. Anything else becomes "".
func expand(text string, t *runnerv1.Task, env map[string]string) string {
	var gh map[string]any
	if c := t.GetContext(); c != nil {
		gh = c.AsMap()
	}
	return exprRe.ReplaceAllStringFunc(text, func(m string) string {
		parts := strings.Split(exprRe.FindStringSubmatch(m)[1], ".")
		switch {
		case parts[0] == "github" && len(parts) == 2:
			if v, ok := gh[parts[1]]; ok && v != nil {
				return fmt.Sprint(v)
			}
		case parts[0] == "secrets" && len(parts) == 2:
			return t.GetSecrets()[parts[1]]
		case parts[0] == "vars" && len(parts) == 2:
			return t.GetVars()[parts[1]]
		case parts[0] == "env" && len(parts) == 2:
			return env[parts[1]]
		case parts[0] == "needs" && len(parts) == 4 && parts[2] == "outputs":
			return t.GetNeeds()[parts[1]].GetOutputs()[parts[3]]
		case parts[0] == "needs" && len(parts) == 3 && parts[2] == "result":
			return strings.ToLower(strings.TrimPrefix(t.GetNeeds()[parts[1]].GetResult().String(), "RESULT_"))
		}
		return ""
	})
}

func runStep(ctx context.Context, log *logger, s step, env []string, workspace string) runnerv1.Result {
	shell := []string{"bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", s.Run}
	if s.Shell == "sh" {
		shell = []string{"sh", "-e", "-c", s.Run}
	}
	cmd := exec.CommandContext(ctx, shell[0], shell[1:]...)
	cmd.Env = env
	cmd.Dir = workspace
	if s.WorkingDirectory != "" {
		cmd.Dir = filepath.Join(workspace, s.WorkingDirectory)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			log.add("%s", sc.Text())
		}
		close(done)
	}()
	err := cmd.Run()
	_ = pw.Close()
	<-done
	if err != nil {
		log.add("step failed: %v", err)
		return runnerv1.Result_RESULT_FAILURE
	}
	return runnerv1.Result_RESULT_SUCCESS
}

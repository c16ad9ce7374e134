package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	runnerv1 "code.gitea.io/actions-proto-go/runner/v1"
	docker_container "github.com/docker/docker/api/types/container"
	"github.com/nektos/act/pkg/common"
	"github.com/nektos/act/pkg/model"
	"github.com/nektos/act/pkg/runner"
	log "github.com/sirupsen/logrus"
	"go.yaml.in/yaml/v4"
)

// TaskRunner runs one task's job on act.
type TaskRunner struct {
	cfg    *Config
	reg    *Registration
	labels []Label
	cache  JobCache // the cache server jobs use (nil when none)
	// daemonSocket is act's ContainerDaemonSocket: the docker daemon mounted
	// into job containers as /var/run/docker.sock ("-": none; "": act's default).
	daemonSocket string
}

// discardLoggerFactory gives act job loggers that print nothing: their entries
// reach Gitea through the Reporter hook only.
type discardLoggerFactory struct{}

func (discardLoggerFactory) WithJobLogger() *log.Logger {
	l := log.New()
	l.SetOutput(io.Discard)
	return l
}

// Run executes the task and reports it; it returns when the final report is sent.
// ctx is the job's context: cancelling it cancels the job.
func (t *TaskRunner) Run(ctx context.Context, cancel context.CancelFunc, cli *Client, task *runnerv1.Task) {
	rowLevel := log.InfoLevel
	if l, err := log.ParseLevel(t.cfg.Log.Level); err == nil && l > rowLevel {
		rowLevel = l
	}
	rep := NewReporter(cli, task, cancel, rowLevel)
	rep.Start(t.cfg.Runner.ReportInterval)
	rep.Logf("%s", Version)
	rep.Logf("runner %s (id %d), task %d", t.reg.Name, t.reg.ID, task.GetId())
	err := t.execute(ctx, rep, task)
	if err != nil {
		log.WithError(err).Errorf("task %d", task.GetId())
	}
	cancelled := errors.Is(ctx.Err(), context.Canceled)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		rep.Logf("the job exceeded runner.timeout (%s)", t.cfg.Runner.Timeout)
	}
	rep.Close(err, cancelled)
}

// taskContext is task.Context as strings.
type taskContext map[string]any

func (c taskContext) str(k string) string {
	switch v := c[k].(type) {
	case nil:
		return ""
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

func (t *TaskRunner) execute(ctx context.Context, rep *Reporter, task *runnerv1.Task) error {
	wf, err := model.ReadWorkflow(bytes.NewReader(task.GetWorkflowPayload()))
	if err != nil {
		return fmt.Errorf("parse the workflow payload: %w", err)
	}
	jobIDs := wf.GetJobIDs()
	if len(jobIDs) != 1 {
		return fmt.Errorf("the workflow payload has %d jobs, want 1", len(jobIDs))
	}
	jobID := jobIDs[0]
	job := wf.GetJob(jobID)
	rep.SetJob(jobID, len(job.Steps))
	addNeeds(wf, jobID, task.GetNeeds())

	tc := taskContext{}
	if c := task.GetContext(); c != nil {
		tc = c.AsMap()
	}
	event, _ := tc["event"].(map[string]any)
	preset := &model.GithubContext{
		Event:           event,
		RunID:           tc.str("run_id"),
		RunNumber:       tc.str("run_number"),
		RunAttempt:      tc.str("run_attempt"),
		Actor:           tc.str("actor"),
		Repository:      tc.str("repository"),
		EventName:       tc.str("event_name"),
		Sha:             tc.str("sha"),
		Ref:             tc.str("ref"),
		RefName:         tc.str("ref_name"),
		RefType:         tc.str("ref_type"),
		HeadRef:         tc.str("head_ref"),
		BaseRef:         tc.str("base_ref"),
		Token:           tc.str("token"),
		RepositoryOwner: tc.str("repository_owner"),
		RetentionDays:   tc.str("retention_days"),
	}
	eventJSON, err := json.Marshal(event)
	if err != nil || event == nil {
		eventJSON = []byte("{}")
	}

	secrets := map[string]string{}
	for k, v := range task.GetSecrets() {
		secrets[k] = v
	}
	// The job token Gitea put in the secrets wins over the context's.
	for _, k := range []string{"GITHUB_TOKEN", "GITEA_TOKEN"} {
		if secrets[k] != "" {
			preset.Token = secrets[k]
		}
	}
	if preset.Token != "" {
		for _, k := range []string{"GITHUB_TOKEN", "GITEA_TOKEN"} {
			if secrets[k] == "" {
				secrets[k] = preset.Token
			}
		}
		rep.AddSecret(preset.Token)
	}
	runtimeToken := tc.str("gitea_runtime_token")
	if runtimeToken == "" {
		runtimeToken = preset.Token // Gitea releases before the runtime token
	}
	if runtimeToken != "" {
		rep.AddSecret(runtimeToken)
	}

	server := strings.TrimSuffix(t.reg.Address, "/")
	env := map[string]string{}
	for k, v := range t.cfg.Runner.Envs {
		env[k] = v
	}
	env["GITEA_ACTIONS"] = "true"
	env["GITEA_ACTIONS_RUNNER_VERSION"] = Version
	env["ACTIONS_RUNTIME_URL"] = server + "/api/actions_pipeline/"
	env["ACTIONS_RESULTS_URL"] = server
	env["ACTIONS_RUNTIME_TOKEN"] = runtimeToken
	if u := tc.str("actions_id_token_request_url"); u != "" { // OIDC, when Gitea offers it
		env["ACTIONS_ID_TOKEN_REQUEST_URL"] = u
		env["ACTIONS_ID_TOKEN_REQUEST_TOKEN"] = tc.str("actions_id_token_request_token")
		secrets["ACTIONS_ID_TOKEN_REQUEST_TOKEN"] = env["ACTIONS_ID_TOKEN_REQUEST_TOKEN"]
		rep.AddSecret(env["ACTIONS_ID_TOKEN_REQUEST_TOKEN"])
	}
	if t.cache != nil {
		// The cache server lets this job's runtime token read and write its
		// repository's entries from now until the job ends.
		if err := t.cache.Register(ctx, runtimeToken, preset.Repository); err != nil {
			rep.Logf("cache server: %v (the job runs without a cache)", err)
		} else {
			env["ACTIONS_CACHE_URL"] = t.cache.URL()
			defer func() {
				if err := t.cache.Revoke(context.Background(), runtimeToken); err != nil {
					log.WithError(err).Warn("revoke the job's token at the cache server")
				}
			}()
		}
	}

	pick := func(runsOn []string) string {
		for _, want := range runsOn {
			for _, l := range t.labels {
				if strings.EqualFold(l.Name, want) {
					return l.Platform()
				}
			}
		}
		return ""
	}
	hostMode := job.Container() == nil && pick(job.RunsOn()) == "-self-hosted"
	// In a container, the workspace is <container.workdir_parent>/<owner>/<repo>.
	// In host mode act runs steps in a fresh directory of its own under
	// ActionCacheDir (removed at the job's end) and maps Workdir onto it.
	workdir := "/" + strings.Trim(t.cfg.Container.WorkdirParent, "/") + "/" + preset.Repository
	if hostMode {
		workdir = filepath.Join(t.cfg.Host.WorkdirParent, fmt.Sprintf("task-%d", task.GetId()), filepath.FromSlash(preset.Repository))
	}

	level := log.TraceLevel // every entry reaches the hook; it keeps rows up to log.level
	rcfg := &runner.Config{
		Actor:                 preset.Actor,
		Workdir:               workdir,
		BindWorkdir:           false,
		ActionCacheDir:        filepath.Join(t.cfg.Host.WorkdirParent, "actions"),
		EventName:             preset.EventName,
		DefaultBranch:         defaultBranch(event),
		ReuseContainers:       false,
		ForcePull:             t.cfg.Container.ForcePull,
		ForceRebuild:          t.cfg.Container.ForceRebuild,
		LogOutput:             true,
		JSONLogger:            false,
		Env:                   env,
		Secrets:               secrets,
		Vars:                  task.GetVars(),
		Token:                 preset.Token,
		InsecureSecrets:       false,
		Privileged:            t.cfg.Container.Privileged,
		ContainerDaemonSocket: t.daemonSocket,
		ContainerOptions:      t.cfg.Container.Options,
		UseGitIgnore:          false,
		GitHubInstance:        server,
		AutoRemove:            true,
		NoSkipCheckout:        true,
		ContainerNetworkMode:  docker_container.NetworkMode(t.cfg.Container.Network),
		PresetGitHubContext:   preset,
		EventJSON:             string(eventJSON),
		ContainerNamePrefix:   fmt.Sprintf("GITEA-ACTIONS-TASK-%d", task.GetId()),
		ContainerMaxLifetime:  t.cfg.Runner.Timeout,
		DefaultActionInstance: server,
		PlatformPicker:        pick,
		JobLoggerLevel:        &level,
		ValidVolumes:          append([]string(nil), t.cfg.Container.ValidVolumes...),
		InsecureSkipTLS:       t.cfg.Runner.Insecure,
	}
	r, err := runner.New(rcfg)
	if err != nil {
		return fmt.Errorf("create the act runner: %w", err)
	}
	plan, err := model.CombineWorkflowPlanner(wf).PlanJob(jobID)
	if err != nil {
		return fmt.Errorf("plan the job: %w", err)
	}
	mode := "host"
	if !hostMode {
		mode = "container"
	}
	rep.Logf("job %s in %s mode", jobID, mode)

	execCtx := common.WithLoggerHook(ctx, rep)
	execCtx = runner.WithJobLoggerFactory(execCtx, discardLoggerFactory{})
	err = r.NewPlanExecutor(plan)(execCtx)
	rep.SetOutputs(job.Outputs)
	return err
}

// addNeeds puts the jobs this one needs into the workflow with their results and
// outputs (from Gitea), so act's `needs` context sees them; they have no steps
// and no runs-on, so act plans but never runs them.
func addNeeds(wf *model.Workflow, jobID string, needs map[string]*runnerv1.TaskNeed) {
	ids := make([]string, 0, len(needs))
	for id, need := range needs {
		ids = append(ids, id)
		wf.Jobs[id] = &model.Job{
			Outputs: need.GetOutputs(),
			Result:  strings.ToLower(strings.TrimPrefix(need.GetResult().String(), "RESULT_")),
		}
	}
	sort.Strings(ids)
	node := yaml.Node{Kind: yaml.SequenceNode}
	for _, id := range ids {
		node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: id})
	}
	wf.Jobs[jobID].RawNeeds = node
}

func defaultBranch(event map[string]any) string {
	if repo, ok := event["repository"].(map[string]any); ok {
		if b, ok := repo["default_branch"].(string); ok {
			return b
		}
	}
	return ""
}

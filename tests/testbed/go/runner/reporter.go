package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	runnerv1 "code.gitea.io/actions-proto-go/runner/v1"
	"connectrpc.com/connect"
	"github.com/nektos/act/pkg/runner"
	log "github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Reporter turns act's log entries into the task's log rows and step states and
// sends them to Gitea: logs every logInterval, the state every StateInterval, and
// everything once more (with no_more and the result) when the task ends.
// It is a logrus hook on act's job logger.
type Reporter struct {
	cli       *Client
	taskID    int64
	cancelJob context.CancelFunc
	rowLevel  log.Level // entries above this level update state but add no row
	jobID     string

	mu          sync.Mutex
	secrets     []string
	state       *runnerv1.TaskState
	result      runnerv1.Result // from act's jobResult; sent only when the task ends
	rows        []*runnerv1.LogRow
	offset      int64 // log index of rows[0]: everything before was acknowledged
	outputs     map[string]string
	sentOutputs map[string]bool

	stop chan struct{}
	done chan struct{}
}

// NewReporter prepares the report for task; cancelJob is called when Gitea
// says the task was cancelled.
func NewReporter(cli *Client, task *runnerv1.Task, cancelJob context.CancelFunc, rowLevel log.Level) *Reporter {
	r := &Reporter{
		cli:         cli,
		taskID:      task.GetId(),
		cancelJob:   cancelJob,
		rowLevel:    rowLevel,
		state:       &runnerv1.TaskState{Id: task.GetId(), StartedAt: timestamppb.Now()},
		outputs:     map[string]string{},
		sentOutputs: map[string]bool{},
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}
	for _, v := range task.GetSecrets() {
		r.addSecret(v)
	}
	return r
}

// AddSecret masks v (and each of its lines) in every later log row.
func (r *Reporter) AddSecret(v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addSecret(v)
}

func (r *Reporter) addSecret(v string) {
	v = strings.TrimSpace(v)
	if v == "" {
		return
	}
	r.secrets = append(r.secrets, v)
	for _, line := range strings.Split(v, "\n") { // a multi-line secret: each line too
		if line = strings.TrimSpace(line); line != "" && line != v {
			r.secrets = append(r.secrets, line)
		}
	}
	// longest first, so a secret containing another is masked whole
	sort.Slice(r.secrets, func(i, j int) bool { return len(r.secrets[i]) > len(r.secrets[j]) })
}

// SetJob names the job act runs for the task and how many steps it has (Gitea
// knows them by index). Entries of other jobs (the `needs` stand-ins) are dropped.
func (r *Reporter) SetJob(jobID string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobID = jobID
	r.state.Steps = make([]*runnerv1.StepState, n)
	for i := range r.state.Steps {
		r.state.Steps[i] = &runnerv1.StepState{Id: int64(i)}
	}
}

// SetOutputs records the job's outputs, sent with the next state report.
func (r *Reporter) SetOutputs(outputs map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range outputs {
		r.outputs[k] = v
	}
}

// Levels implements logrus.Hook: every entry, as the step and job results are
// logged at debug level for skipped steps and jobs.
func (r *Reporter) Levels() []log.Level { return log.AllLevels }

// Fire implements logrus.Hook.
func (r *Reporter) Fire(e *log.Entry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := e.Data["jobID"].(string); ok && r.jobID != "" && id != r.jobID {
		return nil
	}
	var masks []string
	if e.Context != nil {
		masks = *runner.Masks(e.Context)
	}
	var row *runnerv1.LogRow
	if e.Level <= r.rowLevel {
		row = &runnerv1.LogRow{Time: timestamppb.New(e.Time), Content: r.mask(e.Message, masks)}
	}
	stage, _ := e.Data["stage"].(string)
	num, isStep := e.Data["stepNumber"].(int)
	if stage == "Main" && isStep && num >= 0 && num < len(r.state.Steps) {
		step := r.state.Steps[num]
		if step.StartedAt == nil {
			step.StartedAt = timestamppb.New(e.Time)
		}
		if row != nil {
			if step.LogLength == 0 {
				step.LogIndex = r.offset + int64(len(r.rows))
			}
			r.rows = append(r.rows, row)
			step.LogLength++
		}
		if v, ok := e.Data["stepResult"]; ok {
			if res, ok := parseResult(v); ok {
				if step.LogLength == 0 {
					step.LogIndex = r.offset + int64(len(r.rows))
				}
				step.Result = res
				step.StoppedAt = timestamppb.New(e.Time)
			}
		}
		return nil
	}
	if v, ok := e.Data["jobResult"]; ok {
		if res, ok := parseResult(v); ok {
			r.result = res
		}
	}
	if row != nil {
		r.rows = append(r.rows, row)
	}
	return nil
}

// Logf adds a row of the runner's own (outside any step).
func (r *Reporter) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, &runnerv1.LogRow{Time: timestamppb.Now(), Content: r.mask(fmt.Sprintf(format, args...), nil)})
}

func (r *Reporter) mask(s string, masks []string) string {
	s = strings.TrimRight(s, "\r\n")
	for _, v := range r.secrets {
		s = strings.ReplaceAll(s, v, "***")
	}
	for _, v := range masks {
		if v != "" {
			s = strings.ReplaceAll(s, v, "***")
		}
	}
	return s
}

func parseResult(v any) (runnerv1.Result, bool) {
	switch strings.ToLower(fmt.Sprint(v)) {
	case "success":
		return runnerv1.Result_RESULT_SUCCESS, true
	case "failure":
		return runnerv1.Result_RESULT_FAILURE, true
	case "skipped":
		return runnerv1.Result_RESULT_SKIPPED, true
	case "cancelled":
		return runnerv1.Result_RESULT_CANCELLED, true
	}
	return runnerv1.Result_RESULT_UNSPECIFIED, false
}

// Start sends the first state, then reports in the background until Close.
func (r *Reporter) Start(logInterval time.Duration) {
	if err := r.reportState(false); err != nil {
		log.WithError(err).Warn("report task state")
	}
	go func() {
		defer close(r.done)
		logs := time.NewTicker(logInterval)
		state := time.NewTicker(StateInterval)
		defer logs.Stop()
		defer state.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-logs.C:
				if err := r.reportLog(false); err != nil {
					log.WithError(err).Warn("report task log")
				}
			case <-state.C:
				if err := r.reportState(false); err != nil {
					log.WithError(err).Warn("report task state")
				}
			}
		}
	}()
}

// Close ends the report: the result (failure if act reported none, cancelled
// if the job was cancelled), unfinished steps, all log rows with no_more, and
// the final state, retried for a while if Gitea does not answer.
func (r *Reporter) Close(jobErr error, cancelled bool) {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	now := timestamppb.Now()
	if cancelled {
		r.result = runnerv1.Result_RESULT_CANCELLED
	} else if r.result == runnerv1.Result_RESULT_UNSPECIFIED || jobErr != nil && r.result == runnerv1.Result_RESULT_SUCCESS {
		r.result = runnerv1.Result_RESULT_FAILURE
	}
	if jobErr != nil {
		r.rows = append(r.rows, &runnerv1.LogRow{Time: now, Content: r.mask(jobErr.Error(), nil)})
	}
	for _, s := range r.state.Steps {
		if s.Result == runnerv1.Result_RESULT_UNSPECIFIED {
			s.Result = runnerv1.Result_RESULT_CANCELLED
			if r.result == runnerv1.Result_RESULT_SKIPPED || s.StartedAt == nil {
				s.Result = runnerv1.Result_RESULT_SKIPPED
			}
		}
		if s.StartedAt != nil && s.StoppedAt == nil {
			s.StoppedAt = now
		}
		if s.LogLength == 0 && s.LogIndex == 0 {
			s.LogIndex = r.offset + int64(len(r.rows))
		}
	}
	r.mu.Unlock()

	deadline := time.Now().Add(time.Minute)
	for {
		err := r.reportLog(true)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			log.WithError(err).Error("could not send the final task log")
			break
		}
		log.WithError(err).Warn("report final task log, retrying")
		time.Sleep(time.Second)
	}
	for {
		err := r.reportState(true)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			log.WithError(err).Error("could not send the final task state")
			break
		}
		log.WithError(err).Warn("report final task state, retrying")
		time.Sleep(time.Second)
	}
}

// maxRowsPerUpdate bounds one UpdateLog request: a burst of output is sent
// in several.
const maxRowsPerUpdate = 2000

// reportLog sends the rows not yet acknowledged, in batches; with noMore the
// last batch says the log is complete, and every row must be acknowledged.
func (r *Reporter) reportLog(noMore bool) error {
	for {
		r.mu.Lock()
		rows := r.rows
		if len(rows) > maxRowsPerUpdate {
			rows = rows[:maxRowsPerUpdate]
		}
		rows = append([]*runnerv1.LogRow(nil), rows...)
		last := len(rows) == len(r.rows)
		offset := r.offset
		r.mu.Unlock()
		if len(rows) == 0 && !noMore {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := r.cli.UpdateLog(ctx, connect.NewRequest(&runnerv1.UpdateLogRequest{
			TaskId: r.taskID, Index: offset, Rows: rows, NoMore: noMore && last,
		}))
		cancel()
		if err != nil {
			return err
		}
		ack := resp.Msg.GetAckIndex()
		end := offset + int64(len(rows))
		if ack < offset || ack > end {
			return fmt.Errorf("gitea acknowledged log index %d, sent %d..%d", ack, offset, end)
		}
		r.mu.Lock()
		r.rows = r.rows[ack-r.offset:]
		r.offset = ack
		r.mu.Unlock()
		if ack < end {
			if noMore {
				return errors.New("not all log rows were acknowledged")
			}
			return nil
		}
		if last {
			return nil
		}
	}
}

func (r *Reporter) reportState(final bool) error {
	r.mu.Lock()
	state := proto.Clone(r.state).(*runnerv1.TaskState)
	if final {
		state.Result = r.result
		state.StoppedAt = timestamppb.Now()
	}
	outputs := map[string]string{}
	for k, v := range r.outputs {
		if !r.sentOutputs[k] {
			outputs[k] = v
		}
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := r.cli.UpdateTask(ctx, connect.NewRequest(&runnerv1.UpdateTaskRequest{State: state, Outputs: outputs}))
	if err != nil {
		return err
	}
	r.mu.Lock()
	for _, k := range resp.Msg.GetSentOutputs() {
		r.sentOutputs[k] = true
	}
	r.mu.Unlock()
	if s := resp.Msg.GetState(); s != nil && s.GetResult() == runnerv1.Result_RESULT_CANCELLED && !final {
		r.cancelJob() // cancelled in Gitea
	}
	if final {
		for k := range outputs {
			if !r.sentOutputs[k] {
				log.Warnf("gitea did not accept the job output %q", k)
			}
		}
	}
	return nil
}

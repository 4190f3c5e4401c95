package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/cron"
	"github.com/utpmesh/utpmesh/services/atlas/internal/determ"
	"github.com/utpmesh/utpmesh/services/atlas/internal/kit"
	"github.com/utpmesh/utpmesh/services/atlas/internal/notify"
	"github.com/utpmesh/utpmesh/services/state"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// SchedulerConfig configures the Scheduler.
type SchedulerConfig struct {
	// Now is the clock; default time.Now. Tests inject a fake one.
	Now func() time.Time
	// Interval is how often the scheduler looks for due runs; default 5s.
	// Cron times have minute granularity, so a run starts at most Interval
	// late.
	Interval time.Duration
	// Holder names this scheduler in CardStore claims. Default: with the
	// bolt state atlas-scheduler-<host>-<data directory>, the same after
	// a restart, so a run a crash left unfinished is finished at once;
	// with the jetstream state atlas-scheduler-<host>-<pid>.
	Holder string
	// ClaimLease is how long a scheduler has to execute a run it claimed
	// before another may take the run over; default 5m.
	ClaimLease time.Duration
}

// Scheduler runs enabled workflows at their cron times, each scheduled run
// once however many schedulers share the workflows (workers of
// atlas.workflows on the jetstream state).
//
// For each enabled workflow whose next_run has come, RunDue:
//
//  1. in one state transaction, advances next_run to the following cron
//     time and records the run as "running" (run_id derives from the
//     workflow id and the scheduled time). Missed times are caught up one
//     by one, so a restart loses none. Of several schedulers only the one
//     whose transaction commits first records the run: the others find
//     next_run moved and go on;
//  2. claims the run in the CardStore (key atlas/workflows/run/<run_id>,
//     lease ClaimLease) and checks that it is still "running": the claim
//     is the execution lease, so of the schedulers that see a "running"
//     run exactly one executes it;
//  3. executes the actions (publishes notifications with ids derived from
//     the run id) and records the run "completed" or "failed".
//
// A crash between 1 and 3 leaves a "running" run, which the next RunDue
// that can claim it finishes (re-publishing its notifications under the
// same ids): the same scheduler at once after a restart, another one once
// the crashed one's claim has lapsed. A run is never lost, and executed
// twice only if its executor stalls for longer than ClaimLease.
type Scheduler struct {
	svc *kit.Service
	cfg SchedulerConfig
}

func newScheduler(s *kit.Service, cfg SchedulerConfig) *Scheduler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		if d := s.Deps(); d.State == atlas.StateBolt {
			dir, err := filepath.Abs(d.DataDir)
			if err != nil {
				dir = d.DataDir
			}
			cfg.Holder = fmt.Sprintf("atlas-scheduler-%s-%s", host, dir)
		} else {
			cfg.Holder = fmt.Sprintf("atlas-scheduler-%s-%d", host, os.Getpid())
		}
	}
	if cfg.ClaimLease <= 0 {
		cfg.ClaimLease = 5 * time.Minute
	}
	return &Scheduler{svc: s, cfg: cfg}
}

func (s *Scheduler) loop() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-s.svc.Done(); cancel() }()
	if _, _, err := s.svc.Deps().Conn(ctx); err != nil {
		return
	}
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := s.RunDue(ctx); err != nil && ctx.Err() == nil {
			s.svc.Logger().Warn("scheduler pass failed; retrying next tick", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// due is one workflow run to execute.
type due struct {
	project string
	wf      Workflow
	at      string // scheduled time
	runID   string
	resume  bool // a "running" run, recorded before
}

// RunDue executes every run due at the clock's now that no other
// scheduler executes, and returns the ids of the runs it finished.
func (s *Scheduler) RunDue(ctx context.Context) ([]string, error) {
	if err := s.svc.Refused(); err != nil {
		return nil, err
	}
	nc, st, err := s.svc.Deps().Conn(ctx)
	if err != nil {
		return nil, err
	}
	now := determ.Time(s.cfg.Now())
	var done []string
	seen := map[string]bool{} // runs this pass has dealt with
	for {
		d, err := s.next(ctx, now, seen)
		if err != nil || d == nil {
			return done, err
		}
		seen[d.runID] = true
		if !d.resume {
			recorded, err := s.advance(ctx, d)
			if err != nil {
				return done, err
			}
			if !recorded {
				continue // another scheduler recorded it (or the workflow changed)
			}
		}
		if _, err := st.Claim(ctx, cardstore.ClaimRequest{ProjectID: d.project, Key: "atlas.workflows/run/" + d.runID,
			Holder: s.cfg.Holder, Lease: s.cfg.ClaimLease}); err != nil {
			if errors.Is(err, cardstore.ErrClaimHeld) {
				s.svc.Logger().Debug("scheduled run claimed by another scheduler", "run_id", d.runID, "err", err)
				continue
			}
			return done, err
		}
		if running, err := s.running(ctx, d); err != nil || !running {
			if err != nil {
				return done, err
			}
			continue // finished by another scheduler before this one's claim
		}
		run := Run{RunID: d.runID, WorkflowID: d.wf.WorkflowID, Timestamp: d.at, Trigger: "schedule", ScheduledFor: d.at}
		notes := prepare(&run, d.wf)
		run.Status = "completed"
		ver := d.wf.Version
		if ver == "" {
			ver = s.svc.Deps().Version
		}
		for _, n := range notes {
			if err := notify.Publish(ctx, nc, ver, n); err != nil {
				run.Status = "failed"
				for i := range run.Actions {
					if run.Actions[i].NotificationID == n.NotificationID {
						run.Actions[i].Status, run.Actions[i].Error = "failed", err.Error()
					}
				}
			}
		}
		if err := s.svc.State().Update(ctx, func(tx state.Tx) error { return putRun(tx, d.project, run) }); err != nil {
			return done, err
		}
		done = append(done, run.RunID)
	}
}

// next finds one run due at now that seen does not hold: in the first
// project that has one, a run left "running", else the earliest enabled
// workflow whose next_run has come.
func (s *Scheduler) next(ctx context.Context, now time.Time, seen map[string]bool) (*due, error) {
	var found *due
	err := s.svc.State().View(ctx, func(tx state.Tx) error {
		found = nil // a View may run its closure again
		projects, err := tx.Projects()
		if err != nil {
			return err
		}
		for _, project := range projects {
			wfs := tx.Bucket(project, bucketWorkflows)
			err := tx.Bucket(project, bucketRuns).Scan("", false, func(_ string, v []byte) error {
				var r Run
				if err := json.Unmarshal(v, &r); err != nil || r.Status != "running" || seen[r.RunID] {
					return err
				}
				var w Workflow
				if ok, err := toolkit.GetJSON(wfs, r.WorkflowID, &w); err != nil || !ok {
					return err
				}
				found = &due{project: project, wf: w, at: r.ScheduledFor, runID: r.RunID, resume: true}
				return state.ErrStop
			})
			if err != nil || found != nil {
				return err
			}
			err = wfs.Scan("", false, func(_ string, v []byte) error {
				var w Workflow
				if err := json.Unmarshal(v, &w); err != nil {
					return err
				}
				if !w.Enabled || w.NextRun == nil {
					return nil
				}
				at, err := time.Parse(time.RFC3339, *w.NextRun)
				if err != nil || at.After(now) {
					return nil
				}
				id := scheduledRunID(project, w.WorkflowID, *w.NextRun)
				if !seen[id] && (found == nil || *w.NextRun < found.at) {
					found = &due{project: project, wf: w, at: *w.NextRun, runID: id}
				}
				return nil
			})
			if err != nil || found != nil {
				return err
			}
		}
		return nil
	})
	return found, err
}

// running reports whether d's run is recorded and still "running".
func (s *Scheduler) running(ctx context.Context, d *due) (bool, error) {
	var running bool
	err := s.svc.State().View(ctx, func(tx state.Tx) error {
		var r Run
		found, err := toolkit.GetJSON(tx.Bucket(d.project, bucketRuns), d.runID, &r)
		running = found && r.Status == "running"
		return err
	})
	return running, err
}

func scheduledRunID(project, workflowID, at string) string {
	return determ.ID("run", project, workflowID+"@"+at, 0)
}

// advance moves the workflow's next_run past d.at and records the run as
// "running", in one transaction; recorded is false when the workflow is
// no longer due at d.at (another scheduler advanced it, or it changed).
func (s *Scheduler) advance(ctx context.Context, d *due) (recorded bool, err error) {
	err = s.svc.State().Update(ctx, func(tx state.Tx) error {
		recorded = false // an Update may run its closure again
		wfs := tx.Bucket(d.project, bucketWorkflows)
		var w Workflow
		if ok, err := toolkit.GetJSON(wfs, d.wf.WorkflowID, &w); err != nil || !ok {
			return err
		}
		if !w.Enabled || w.NextRun == nil || *w.NextRun != d.at {
			return nil // changed meanwhile
		}
		at, _ := time.Parse(time.RFC3339, d.at)
		sched, err := cron.Parse(w.Trigger.Cron)
		if err != nil {
			w.NextRun = nil
		} else {
			loc := time.UTC
			if w.Trigger.Timezone != "" {
				if l, err := time.LoadLocation(w.Trigger.Timezone); err == nil {
					loc = l
				}
			}
			if n, ok := sched.Next(at.In(loc)); ok {
				v := determ.Format(n)
				w.NextRun = &v
			} else {
				w.NextRun = nil
			}
		}
		if err := toolkit.PutJSON(wfs, w.WorkflowID, w); err != nil {
			return err
		}
		if _, found, err := tx.Bucket(d.project, bucketRuns).Get(d.runID); err != nil || found {
			return err
		}
		recorded = true
		return putRun(tx, d.project, Run{RunID: d.runID, WorkflowID: w.WorkflowID, Timestamp: d.at, Status: "running",
			Trigger: "schedule", ScheduledFor: d.at, Actions: []ActionResult{}})
	})
	return recorded, err
}

// publishAll publishes the notifications of a manual run.
func publishAll(ctx context.Context, s *kit.Service, ver string, notes []notify.Notification) error {
	if len(notes) == 0 {
		return nil
	}
	nc, _, err := s.Deps().Conn(ctx)
	if err != nil {
		return err
	}
	for _, n := range notes {
		if err := notify.Publish(ctx, nc, ver, n); err != nil {
			return err
		}
	}
	return nil
}

package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/utpmesh/utpmesh/cardstore"
	"github.com/utpmesh/utpmesh/services/atlas/internal/cron"
	"github.com/utpmesh/utpmesh/services/atlas/internal/determ"
	"github.com/utpmesh/utpmesh/services/atlas/internal/kit"
	"github.com/utpmesh/utpmesh/services/atlas/internal/notify"
)

// SchedulerConfig configures the Scheduler.
type SchedulerConfig struct {
	// Now is the clock; default time.Now. Tests inject a fake one.
	Now func() time.Time
	// Interval is how often the scheduler looks for due runs; default 5s.
	// Cron times have minute granularity, so a run starts at most Interval
	// late.
	Interval time.Duration
	// Holder names this scheduler in CardStore claims; default
	// atlas-scheduler-<host>-<pid>.
	Holder string
	// ClaimLease is how long a claimed run stays claimed; default 1h.
	ClaimLease time.Duration
}

// Scheduler runs enabled workflows at their cron times.
//
// For each enabled workflow whose next_run has come, RunDue:
//
//  1. claims the run in the CardStore (key atlas/workflows/run/<run_id>,
//     where run_id derives from the workflow id and the scheduled time), so
//     that two schedulers sharing a workflow never both run it;
//  2. in one bbolt transaction records the run as "running" and advances
//     next_run to the following cron time (missed times are caught up one
//     by one, so a restart loses none);
//  3. executes the actions (publishes notifications with ids derived from
//     the run id) and records the run "completed" or "failed".
//
// A crash between 2 and 3 leaves a "running" run, which the next RunDue
// finishes (re-publishing its notifications under the same ids): a run is
// never executed twice from scratch and never lost.
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
		cfg.Holder = fmt.Sprintf("atlas-scheduler-%s-%d", host, os.Getpid())
	}
	if cfg.ClaimLease <= 0 {
		cfg.ClaimLease = time.Hour
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
	resume  bool // a "running" run left by a crash
}

// RunDue executes every run due at the clock's now and returns the ids of
// the runs it finished.
func (s *Scheduler) RunDue(ctx context.Context) ([]string, error) {
	nc, st, err := s.svc.Deps().Conn(ctx)
	if err != nil {
		return nil, err
	}
	now := determ.Time(s.cfg.Now())
	var done []string
	for {
		d, err := s.next(now)
		if err != nil || d == nil {
			return done, err
		}
		if !d.resume {
			if _, err := st.Claim(ctx, cardstore.ClaimRequest{ProjectID: d.project, Key: "atlas/workflows/run/" + d.runID,
				Holder: s.cfg.Holder, Lease: s.cfg.ClaimLease}); err != nil {
				if errors.Is(err, cardstore.ErrClaimHeld) {
					s.svc.Logger().Info("scheduled run claimed by another scheduler", "run_id", d.runID)
					if err := s.advance(d, false); err != nil {
						return done, err
					}
					continue
				}
				return done, err
			}
			if err := s.advance(d, true); err != nil {
				return done, err
			}
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
		if err := s.svc.DB().Update(func(tx *bolt.Tx) error { return putRun(tx, d.project, run) }); err != nil {
			return done, err
		}
		done = append(done, run.RunID)
	}
}

// next finds one run due at now: first a run left "running", then the
// earliest enabled workflow whose next_run has come.
func (s *Scheduler) next(now time.Time) (*due, error) {
	var found *due
	err := s.svc.DB().View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, top *bolt.Bucket) error {
			project, ok := strings.CutPrefix(string(name), "p:")
			if !ok || found != nil {
				return nil
			}
			wfs, runs := top.Bucket([]byte(bucketWorkflows)), top.Bucket([]byte(bucketRuns))
			if runs != nil {
				if err := runs.ForEach(func(_, v []byte) error {
					var r Run
					if found != nil {
						return nil
					}
					if err := json.Unmarshal(v, &r); err != nil || r.Status != "running" {
						return err
					}
					var w Workflow
					if ok, err := kit.GetJSON(wfs, r.WorkflowID, &w); err != nil || !ok {
						return err
					}
					found = &due{project: project, wf: w, at: r.ScheduledFor, runID: r.RunID, resume: true}
					return nil
				}); err != nil || found != nil {
					return err
				}
			}
			if wfs == nil {
				return nil
			}
			return wfs.ForEach(func(k, _ []byte) error {
				var w Workflow
				if _, err := kit.GetJSON(wfs, string(k), &w); err != nil {
					return err
				}
				if !w.Enabled || w.NextRun == nil {
					return nil
				}
				at, err := time.Parse(time.RFC3339, *w.NextRun)
				if err != nil || at.After(now) {
					return nil
				}
				if found == nil || *w.NextRun < found.at {
					found = &due{project: project, wf: w, at: *w.NextRun, runID: scheduledRunID(project, w.WorkflowID, *w.NextRun)}
				}
				return nil
			})
		})
	})
	return found, err
}

func scheduledRunID(project, workflowID, at string) string {
	return determ.ID("run", project, workflowID+"@"+at, 0)
}

// advance moves the workflow's next_run past d.at and, when record is set,
// records the run as "running" — in one transaction, so a claimed run is
// never lost and never claimed twice.
func (s *Scheduler) advance(d *due, record bool) error {
	return s.svc.DB().Update(func(tx *bolt.Tx) error {
		x := &kit.Exec{Tx: tx, Project: d.project}
		wfs, err := x.Bucket(bucketWorkflows)
		if err != nil {
			return err
		}
		var w Workflow
		if ok, err := kit.GetJSON(wfs, d.wf.WorkflowID, &w); err != nil || !ok {
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
		if err := kit.PutJSON(wfs, w.WorkflowID, w); err != nil {
			return err
		}
		if !record {
			return nil
		}
		runs, err := x.Bucket(bucketRuns)
		if err != nil {
			return err
		}
		if runs.Get([]byte(d.runID)) != nil {
			return nil
		}
		return putRun(tx, d.project, Run{RunID: d.runID, WorkflowID: w.WorkflowID, Timestamp: d.at, Status: "running",
			Trigger: "schedule", ScheduledFor: d.at, Actions: []ActionResult{}})
	})
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

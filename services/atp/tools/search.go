package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atp/booking"
	"github.com/utpmesh/utpmesh/services/state"
)

// Activity is a Capability Declaration in the service's activity
// registry (what atp_search_activities returns).
type Activity struct {
	ActivityID  string `json:"activity_id"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
	Category    string `json:"category"`
	OperatorID  string `json:"operator_id"`
	Location    string `json:"location,omitempty"`
	// PricingSnapshot is the price at the time of the declaration, e.g.
	// {"currency":"JPY","amount":12000,"per":"PERSON"}.
	PricingSnapshot json.RawMessage `json:"pricing_snapshot"`
	// AvailabilityStatus is AVAILABLE, LIMITED or SOLD_OUT.
	AvailabilityStatus string `json:"availability_status"`
	// Dates the activity runs on (YYYY-MM-DD); empty: any date.
	Dates []string `json:"dates,omitempty"`
	// Capacity per date; 0: unlimited.
	Capacity int `json:"capacity,omitempty"`
	// Source is ATP_NATIVE or OCTO_BRIDGE.
	Source string `json:"source"`
	// OCTO names the supplier, product, option and slot of a bridged
	// activity (what an OCTO booking needs).
	OCTO map[string]string `json:"octo,omitempty"`
}

// PutActivity stores (replaces) a Capability Declaration in the
// project's activity registry.
func (s *Service) PutActivity(ctx context.Context, project string, a Activity) error {
	if a.ActivityID == "" || a.Category == "" || a.OperatorID == "" {
		return fmt.Errorf("atp: an activity needs activity_id, category and operator_id")
	}
	switch a.AvailabilityStatus {
	case "AVAILABLE", "LIMITED", "SOLD_OUT":
	default:
		return fmt.Errorf("atp: activity %s: availability_status %q; use AVAILABLE, LIMITED or SOLD_OUT", a.ActivityID, a.AvailabilityStatus)
	}
	if a.Source == "" {
		a.Source = "ATP_NATIVE"
	}
	if len(a.PricingSnapshot) == 0 {
		a.PricingSnapshot = json.RawMessage("null")
	}
	raw, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return s.store.State().Update(ctx, func(tx state.Tx) error {
		return tx.Bucket(project, booking.BucketActivities).Put(a.ActivityID, raw)
	})
}

func (s *Service) searchActivities(ctx context.Context, c *worker.Call) (any, error) {
	var q struct {
		Query        string `json:"query"`
		Category     string `json:"category"`
		Location     string `json:"location"`
		Date         string `json:"date"`
		Participants int    `json:"participants"`
		Limit        int    `json:"limit"`
	}
	if err := bind(c, &q); err != nil {
		return nil, err
	}
	if q.Limit == 0 {
		q.Limit = 20
	}
	out := []Activity{}
	err := s.store.State().View(ctx, func(tx state.Tx) error {
		out = out[:0]
		return tx.Bucket(c.ProjectID, booking.BucketActivities).Scan("", false, func(_ string, v []byte) error {
			var a Activity
			if err := json.Unmarshal(v, &a); err != nil {
				return err
			}
			if matches(a, q.Query, q.Category, q.Location, q.Date, q.Participants) {
				out = append(out, a)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	partial := false
	date := q.Date
	if date == "" {
		date = s.store.Now().Format("2006-01-02")
	}
	for _, sup := range s.deps.OCTOSuppliers {
		ds, err := sup.Search(ctx, date, q.Participants)
		if err != nil {
			// The other sources still answer; the result is partial.
			s.deps.Logger.Warn("atp: OCTO supplier did not answer", "supplier", sup.ID, "err", err)
			partial = true
			continue
		}
		for _, d := range ds {
			a := Activity{ActivityID: d.ActivityID, Title: d.Title, Category: d.Category, OperatorID: d.OperatorID, Location: d.Location,
				PricingSnapshot: d.PricingSnapshot, AvailabilityStatus: d.AvailabilityStatus, Capacity: d.Capacity, Source: d.Source, OCTO: d.OCTO}
			if matches(a, q.Query, q.Category, q.Location, "", 0) {
				out = append(out, a)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ActivityID < out[j].ActivityID })
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if partial {
		return worker.Result{Status: card.StatusPartial, Value: out}, nil
	}
	return out, nil
}

func matches(a Activity, query, category, location, date string, participants int) bool {
	fold := strings.ToLower
	if category != "" && !strings.EqualFold(a.Category, category) {
		return false
	}
	if location != "" && !strings.Contains(fold(a.Location), fold(location)) {
		return false
	}
	if query != "" {
		text := fold(a.Title + " " + a.Description)
		for _, w := range strings.Fields(fold(query)) {
			if !strings.Contains(text, w) {
				return false
			}
		}
	}
	if date != "" && len(a.Dates) > 0 {
		found := false
		for _, d := range a.Dates {
			found = found || d == date
		}
		if !found {
			return false
		}
	}
	return participants == 0 || a.Capacity == 0 || participants <= a.Capacity
}

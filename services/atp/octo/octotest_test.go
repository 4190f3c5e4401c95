package octo_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/services/atp/octo"
	"github.com/utpmesh/utpmesh/services/atp/octo/octotest"
)

// TestBridgeAgainstFakeSupplier runs the bridge against octotest: the
// product filter, a reservation and its confirmation, and OCTO errors
// named in the bridge's error.
func TestBridgeAgainstFakeSupplier(t *testing.T) {
	intp := func(n int) *int { return &n }
	srv := octotest.Start(t, "key-1", []octo.Product{
		{ID: "prod-kayak", InternalName: "Sea kayak tour", Options: []octo.Option{{ID: "opt-am", Default: true, Units: []octo.Unit{{ID: "unit-adult", Type: "ADULT"}}}}},
		{ID: "prod-bike", InternalName: "E-bike rental", Options: []octo.Option{{ID: "opt-day", Default: true}}},
	}, map[string][]octo.Availability{
		"opt-am":  {{ID: "slot-am", LocalDateTimeStart: "2027-01-18T09:00:00+09:00", Available: true, Status: "AVAILABLE", Vacancies: intp(4)}},
		"opt-day": {{ID: "slot-day", LocalDateTimeStart: "2027-01-18T00:00:00+09:00", Available: true, Status: "FREESALE"}},
	})
	ctx := context.Background()
	s := &octo.Supplier{ID: "kayak", BaseURL: srv.URL, APIKey: "key-1", ProductIDs: []string{"prod-kayak"}, Category: "WATER"}
	ds, err := s.Search(ctx, "2027-01-18", 2)
	if err != nil || len(ds) != 1 || ds[0].ActivityID != "octo:kayak:prod-kayak:opt-am" || ds[0].AvailabilityStatus != "AVAILABLE" || ds[0].Capacity != 4 {
		t.Fatalf("search: %+v %v", ds, err)
	}
	b, err := s.Reserve(ctx, "uuid-1", "prod-kayak", "opt-am", ds[0].OCTO["availability_id"], []string{"unit-adult", "unit-adult"})
	if err != nil || b.Status != "ON_HOLD" || b.UUID != "uuid-1" {
		t.Fatalf("reserve: %+v %v", b, err)
	}
	if b, err = s.Confirm(ctx, "uuid-1", "Aiko Tanaka", "aiko@example.test"); err != nil || b.Status != "CONFIRMED" || srv.Booking("uuid-1").Status != "CONFIRMED" {
		t.Fatalf("confirm: %+v %v", b, err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"unknown unit", func() error {
			_, err := s.Reserve(ctx, "uuid-2", "prod-kayak", "opt-am", "slot-am", []string{"unit-child"})
			return err
		}, "400 Bad Request INVALID_UNIT_ID"},
		{"unknown slot", func() error {
			_, err := s.Reserve(ctx, "uuid-3", "prod-kayak", "opt-am", "slot-pm", []string{"unit-adult"})
			return err
		}, "INVALID_AVAILABILITY_ID"},
		{"unknown booking", func() error { _, err := s.Confirm(ctx, "uuid-9", "x", "x@example.test"); return err }, "INVALID_BOOKING_UUID"},
		{"unknown option", func() error {
			_, err := s.Availability(ctx, "prod-kayak", "opt-pm", "2027-01-18", "2027-01-18")
			return err
		}, "INVALID_OPTION_ID"},
		{"wrong key", func() error {
			_, err := (&octo.Supplier{ID: "kayak", BaseURL: srv.URL, APIKey: "key-2"}).Search(ctx, "2027-01-18", 0)
			return err
		}, "supplier kayak: GET /products: 401 Unauthorized UNAUTHORIZED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, octo.ErrSupplier) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "key-") {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

package octo_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/utpmesh/utpmesh/services/atp/octo"
)

// fakeSupplier serves the OCTO shapes the bridge uses: two products (one
// with two options and pricing), availability per option, and bookings.
func fakeSupplier(t *testing.T) *httptest.Server {
	t.Helper()
	intp := func(n int) *int { return &n }
	products := []octo.Product{
		{ID: "prod-kayak", InternalName: "Sea kayak tour", TimeZone: "Asia/Tokyo", Options: []octo.Option{
			{ID: "opt-am", Default: true, InternalName: "Morning", Units: []octo.Unit{{ID: "unit-adult", Type: "ADULT",
				PricingFrom: []octo.Price{{Original: 900000, Retail: 850000, Currency: "JPY", CurrencyPrecision: 2}}}}},
			{ID: "opt-pm", InternalName: "Sunset", PricingFrom: []octo.Price{{Original: 1200000, Retail: 1100000, Currency: "JPY", CurrencyPrecision: 2}}},
		}},
		{ID: "prod-bike", InternalName: "E-bike rental", Options: []octo.Option{{ID: "opt-day", Default: true}}},
	}
	slots := map[string][]octo.Availability{
		"opt-am":  {{ID: "2027-01-18T09:00:00+09:00", Available: true, Status: "AVAILABLE", Vacancies: intp(6), Capacity: intp(8)}},
		"opt-pm":  {{ID: "2027-01-18T16:00:00+09:00", Available: true, Status: "LIMITED", Vacancies: intp(2), Capacity: intp(8)}},
		"opt-day": {{ID: "2027-01-18", Available: false, Status: "SOLD_OUT", Vacancies: intp(0)}},
	}
	mux := http.NewServeMux()
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer key-1" {
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(`{"error":"UNAUTHORIZED","errorMessage":"bad api key"}`))
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /products", auth(func(w http.ResponseWriter, r *http.Request) { _ = json.NewEncoder(w).Encode(products) }))
	mux.HandleFunc("POST /availability", auth(func(w http.ResponseWriter, r *http.Request) {
		var q struct{ ProductID, OptionID, LocalDateStart, LocalDateEnd string }
		_ = json.NewDecoder(r.Body).Decode(&q)
		if q.LocalDateStart != "2027-01-18" || q.LocalDateEnd != "2027-01-18" {
			_ = json.NewEncoder(w).Encode([]octo.Availability{})
			return
		}
		_ = json.NewEncoder(w).Encode(slots[q.OptionID])
	}))
	mux.HandleFunc("POST /bookings", auth(func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			UUID, ProductID, OptionID, AvailabilityID string
			UnitItems                                 []struct{ UnitID string }
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		if len(b.UnitItems) == 0 {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"BAD_REQUEST","errorMessage":"unitItems is empty"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(octo.Booking{ID: "bk-1", UUID: b.UUID, Status: "ON_HOLD", ProductID: b.ProductID, OptionID: b.OptionID, AvailabilityID: b.AvailabilityID})
	}))
	mux.HandleFunc("POST /bookings/{uuid}/confirm", auth(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(octo.Booking{ID: "bk-1", UUID: r.PathValue("uuid"), Status: "CONFIRMED"})
	}))
	mux.HandleFunc("GET /slow/products", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestSearchMapsProducts(t *testing.T) {
	srv := fakeSupplier(t)
	s := &octo.Supplier{ID: "sup-kayak", BaseURL: srv.URL, APIKey: "key-1", Category: "WATER", Location: "Otaru"}
	ctx := context.Background()
	got, err := s.Search(ctx, "2027-01-18", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ id, title, status, price string }{
		{"octo:sup-kayak:prod-kayak:opt-am", "Sea kayak tour", "AVAILABLE", `{"amount":8500,"currency":"JPY","per":"UNIT"}`},
		{"octo:sup-kayak:prod-kayak:opt-pm", "Sea kayak tour – Sunset", "LIMITED", `{"amount":11000,"currency":"JPY","per":"UNIT"}`},
		{"octo:sup-kayak:prod-bike:opt-day", "E-bike rental", "SOLD_OUT", `null`},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d declarations: %+v", len(got), got)
	}
	for i, w := range want {
		d := got[i]
		if d.ActivityID != w.id || d.Title != w.title || d.AvailabilityStatus != w.status || string(d.PricingSnapshot) != w.price ||
			d.Source != "OCTO_BRIDGE" || d.Category != "WATER" || d.OperatorID != "sup-kayak" || d.Location != "Otaru" {
			t.Errorf("%d: %+v", i, d)
		}
	}
	if got[0].OCTO["availability_id"] != "2027-01-18T09:00:00+09:00" || got[0].Capacity != 6 {
		t.Errorf("slot: %+v", got[0])
	}
	three, _ := s.Search(ctx, "2027-01-18", 3)
	if three[1].AvailabilityStatus != "SOLD_OUT" {
		t.Errorf("2 vacancies for 3 participants: %s", three[1].AvailabilityStatus)
	}

	t.Run("booking from a search", func(t *testing.T) {
		d := got[0]
		held, err := s.Reserve(ctx, "0190a000-0000-7000-8000-000000000001", d.OCTO["product_id"], d.OCTO["option_id"], d.OCTO["availability_id"], []string{"unit-adult", "unit-adult"})
		if err != nil || held.Status != "ON_HOLD" || held.AvailabilityID != d.OCTO["availability_id"] {
			t.Fatalf("reserve: %+v %v", held, err)
		}
		done, err := s.Confirm(ctx, held.UUID, "Aiko Tanaka", "aiko@example.test")
		if err != nil || done.Status != "CONFIRMED" {
			t.Fatalf("confirm: %+v %v", done, err)
		}
		if _, err := s.Reserve(ctx, "u2", "prod-kayak", "opt-am", "x", nil); !errors.Is(err, octo.ErrSupplier) || !strings.Contains(err.Error(), "unitItems is empty") {
			t.Fatalf("empty reserve: %v", err)
		}
	})
}

func TestSupplierFailures(t *testing.T) {
	srv := fakeSupplier(t)
	for _, tc := range []struct {
		name string
		s    *octo.Supplier
		want string
	}{
		{"bad key", &octo.Supplier{ID: "s", BaseURL: srv.URL, APIKey: "wrong"}, "bad api key"},
		{"timeout", &octo.Supplier{ID: "s", BaseURL: srv.URL + "/slow", APIKey: "key-1", Timeout: 100 * time.Millisecond}, "deadline exceeded"},
		{"not OCTO", &octo.Supplier{ID: "s", BaseURL: srv.URL + "/nothing", APIKey: "key-1"}, "404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.s.Search(context.Background(), "2027-01-18", 0)
			if !errors.Is(err, octo.ErrSupplier) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// Package octotest is a local fake OCTO supplier for tests, built from the
// OCTO API's documented core endpoints: GET /products, GET
// /products/{id}, POST /availability, POST /bookings (a reservation,
// ON_HOLD), POST /bookings/{uuid}/confirm (CONFIRMED) and GET
// /bookings/{uuid}. Requests need "Authorization: Bearer <key>"; errors
// are OCTO error bodies ({"error","errorMessage"}: UNAUTHORIZED,
// BAD_REQUEST, INVALID_PRODUCT_ID, INVALID_OPTION_ID,
// INVALID_AVAILABILITY_ID, INVALID_UNIT_ID, INVALID_BOOKING_UUID).
package octotest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/utpmesh/utpmesh/services/atp/octo"
)

// Supplier is a running fake supplier.
type Supplier struct {
	*httptest.Server
	key      string
	products []octo.Product
	slots    map[string][]octo.Availability
	mu       sync.Mutex
	bookings map[string]*octo.Booking
	requests []string
}

// Start serves products, with the availability slots of each option id
// in slots, to clients that present key. It stops when the test ends.
func Start(t testing.TB, key string, products []octo.Product, slots map[string][]octo.Availability) *Supplier {
	t.Helper()
	s := &Supplier{key: key, products: products, slots: slots, bookings: map[string]*octo.Booking{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /products", s.auth(func(w http.ResponseWriter, r *http.Request) { answer(w, http.StatusOK, s.products) }))
	mux.HandleFunc("GET /products/{id}", s.auth(func(w http.ResponseWriter, r *http.Request) {
		if p := s.product(r.PathValue("id")); p != nil {
			answer(w, http.StatusOK, p)
			return
		}
		octoError(w, http.StatusBadRequest, "INVALID_PRODUCT_ID", "unknown product "+r.PathValue("id"))
	}))
	mux.HandleFunc("POST /availability", s.auth(s.availability))
	mux.HandleFunc("POST /bookings", s.auth(s.reserve))
	mux.HandleFunc("POST /bookings/{uuid}/confirm", s.auth(s.confirm))
	mux.HandleFunc("GET /bookings/{uuid}", s.auth(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		b := s.bookings[r.PathValue("uuid")]
		s.mu.Unlock()
		if b == nil {
			octoError(w, http.StatusBadRequest, "INVALID_BOOKING_UUID", "no booking "+r.PathValue("uuid"))
			return
		}
		answer(w, http.StatusOK, b)
	}))
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// Requests lists "METHOD /path" of every request, in order.
func (s *Supplier) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// Booking returns a booking by uuid (nil: none).
func (s *Supplier) Booking(uuid string) *octo.Booking {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.bookings[uuid]; b != nil {
		c := *b
		return &c
	}
	return nil
}

func (s *Supplier) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+s.key {
			octoError(w, http.StatusUnauthorized, "UNAUTHORIZED", "missing or unknown API key")
			return
		}
		h(w, r)
	}
}

func (s *Supplier) product(id string) *octo.Product {
	for i := range s.products {
		if s.products[i].ID == id {
			return &s.products[i]
		}
	}
	return nil
}

func (s *Supplier) option(w http.ResponseWriter, productID, optionID string) *octo.Option {
	p := s.product(productID)
	if p == nil {
		octoError(w, http.StatusBadRequest, "INVALID_PRODUCT_ID", "unknown productId "+productID)
		return nil
	}
	for i := range p.Options {
		if p.Options[i].ID == optionID {
			return &p.Options[i]
		}
	}
	octoError(w, http.StatusBadRequest, "INVALID_OPTION_ID", "unknown optionId "+optionID)
	return nil
}

func (s *Supplier) availability(w http.ResponseWriter, r *http.Request) {
	var q struct {
		ProductID       string   `json:"productId"`
		OptionID        string   `json:"optionId"`
		LocalDateStart  string   `json:"localDateStart"`
		LocalDateEnd    string   `json:"localDateEnd"`
		AvailabilityIDs []string `json:"availabilityIds"`
	}
	if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
		octoError(w, http.StatusBadRequest, "BAD_REQUEST", "body is not JSON: "+err.Error())
		return
	}
	if (q.LocalDateStart == "") != (q.LocalDateEnd == "") || (q.LocalDateStart == "" && len(q.AvailabilityIDs) == 0) {
		octoError(w, http.StatusBadRequest, "BAD_REQUEST", "give localDateStart and localDateEnd, or availabilityIds")
		return
	}
	if s.option(w, q.ProductID, q.OptionID) == nil {
		return
	}
	out := []octo.Availability{}
	for _, a := range s.slots[q.OptionID] {
		day := a.ID
		if len(a.LocalDateTimeStart) >= 10 {
			day = a.LocalDateTimeStart[:10]
		}
		if slices.Contains(q.AvailabilityIDs, a.ID) || (q.LocalDateStart != "" && day >= q.LocalDateStart && day <= q.LocalDateEnd) {
			out = append(out, a)
		}
	}
	answer(w, http.StatusOK, out)
}

func (s *Supplier) reserve(w http.ResponseWriter, r *http.Request) {
	var b struct {
		UUID           string `json:"uuid"`
		ProductID      string `json:"productId"`
		OptionID       string `json:"optionId"`
		AvailabilityID string `json:"availabilityId"`
		UnitItems      []struct {
			UnitID string `json:"unitId"`
		} `json:"unitItems"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.AvailabilityID == "" || len(b.UnitItems) == 0 {
		octoError(w, http.StatusBadRequest, "BAD_REQUEST", "productId, optionId, availabilityId and unitItems are required")
		return
	}
	o := s.option(w, b.ProductID, b.OptionID)
	if o == nil {
		return
	}
	var slot *octo.Availability
	for i, a := range s.slots[b.OptionID] {
		if a.ID == b.AvailabilityID {
			slot = &s.slots[b.OptionID][i]
		}
	}
	if slot == nil || !slot.Available {
		octoError(w, http.StatusBadRequest, "INVALID_AVAILABILITY_ID", "no open availability "+b.AvailabilityID)
		return
	}
	for _, u := range b.UnitItems {
		if !slices.ContainsFunc(o.Units, func(x octo.Unit) bool { return x.ID == u.UnitID }) {
			octoError(w, http.StatusBadRequest, "INVALID_UNIT_ID", "unknown unitId "+u.UnitID)
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev := s.bookings[b.UUID]; b.UUID != "" && prev != nil {
		answer(w, http.StatusOK, prev) // the uuid makes a reservation idempotent
		return
	}
	if b.UUID == "" {
		b.UUID = fmt.Sprintf("bk-%d", len(s.bookings)+1)
	}
	bk := &octo.Booking{ID: b.UUID, UUID: b.UUID, Status: "ON_HOLD", ProductID: b.ProductID, OptionID: b.OptionID, AvailabilityID: b.AvailabilityID}
	s.bookings[b.UUID] = bk
	answer(w, http.StatusOK, bk)
}

func (s *Supplier) confirm(w http.ResponseWriter, r *http.Request) {
	var c struct {
		Contact struct {
			FullName     string `json:"fullName"`
			EmailAddress string `json:"emailAddress"`
		} `json:"contact"`
	}
	_ = json.NewDecoder(r.Body).Decode(&c)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bookings[r.PathValue("uuid")]
	if b == nil {
		octoError(w, http.StatusBadRequest, "INVALID_BOOKING_UUID", "no booking "+r.PathValue("uuid"))
		return
	}
	b.Status = "CONFIRMED"
	answer(w, http.StatusOK, b)
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func octoError(w http.ResponseWriter, status int, code, msg string) {
	answer(w, status, map[string]string{"error": code, "errorMessage": msg})
}

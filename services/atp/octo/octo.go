// Package octo is the OCTO bridge of atp_search_activities: an HTTP client
// for an OCTO supplier API (GET /products, POST /availability, and the
// booking calls POST /bookings and POST /bookings/{uuid}/confirm) and the
// mapping of OCTO products to ATP Capability Declarations
// (source OCTO_BRIDGE). Each supplier has its own base URL, API key,
// timeout and the ATP fields OCTO core does not carry (category,
// location). docs/catalogues/atp.md has the field table.
package octo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
)

// ErrSupplier: the supplier failed, timed out or answered something that
// is not OCTO.
var ErrSupplier = errors.New("octo: supplier error")

// Supplier is one configured OCTO supplier.
type Supplier struct {
	// ID names the supplier; it becomes the activities' operator_id.
	ID string `json:"id"`
	// BaseURL is the OCTO API root, e.g. https://api.supplier.example/octo.
	BaseURL string `json:"base_url"`
	// APIKey is sent as "Authorization: Bearer <key>".
	APIKey string `json:"api_key"`
	// Category and Location fill the ATP fields OCTO core lacks.
	Category string `json:"category"`
	Location string `json:"location"`
	// ProductIDs, when set, are the only product ids bridged (the
	// supplier's other products are skipped); empty: every product.
	ProductIDs []string `json:"products,omitempty"`
	// Timeout bounds each request; default 5s.
	Timeout time.Duration `json:"timeout"`
	// Client; default http.DefaultClient (with Timeout per request).
	Client *http.Client `json:"-"`
}

// Product is the part of an OCTO product the bridge reads.
type Product struct {
	ID           string   `json:"id"`
	InternalName string   `json:"internalName"`
	Reference    string   `json:"reference"`
	TimeZone     string   `json:"timeZone"`
	Options      []Option `json:"options"`
}

// Option is an OCTO product option.
type Option struct {
	ID           string  `json:"id"`
	Default      bool    `json:"default"`
	InternalName string  `json:"internalName"`
	Units        []Unit  `json:"units"`
	PricingFrom  []Price `json:"pricingFrom,omitempty"`
}

// Unit is an OCTO unit (ADULT, CHILD…).
type Unit struct {
	ID           string  `json:"id"`
	InternalName string  `json:"internalName"`
	Type         string  `json:"type"`
	PricingFrom  []Price `json:"pricingFrom,omitempty"`
}

// Price is an OCTO pricing object (octo/pricing capability).
type Price struct {
	Original          int    `json:"original"`
	Retail            int    `json:"retail"`
	Net               *int   `json:"net"`
	Currency          string `json:"currency"`
	CurrencyPrecision int    `json:"currencyPrecision"`
}

// Availability is one OCTO availability slot.
type Availability struct {
	ID                 string `json:"id"`
	LocalDateTimeStart string `json:"localDateTimeStart"`
	LocalDateTimeEnd   string `json:"localDateTimeEnd"`
	AllDay             bool   `json:"allDay"`
	Available          bool   `json:"available"`
	// Status is AVAILABLE, FREESALE, SOLD_OUT, LIMITED or CLOSED.
	Status    string `json:"status"`
	Vacancies *int   `json:"vacancies"`
	Capacity  *int   `json:"capacity"`
}

// Booking is the part of an OCTO booking the bridge reads.
type Booking struct {
	ID             string `json:"id"`
	UUID           string `json:"uuid"`
	Status         string `json:"status"`
	ProductID      string `json:"productId"`
	OptionID       string `json:"optionId"`
	AvailabilityID string `json:"availabilityId"`
}

func (s *Supplier) do(ctx context.Context, method, path string, body, out any) error {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(s.BaseURL, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("%w: supplier %s: %v", ErrSupplier, s.ID, err)
	}
	req.Header.Set("Authorization", "Bearer "+s.APIKey)
	req.Header.Set("Octo-Capabilities", "octo/pricing")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	cl := s.Client
	if cl == nil {
		cl = http.DefaultClient
	}
	resp, err := cl.Do(req)
	if err != nil {
		return fmt.Errorf("%w: supplier %s: %s %s: %v", ErrSupplier, s.ID, method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error        string `json:"error"`
			ErrorMessage string `json:"errorMessage"`
		}
		_ = json.Unmarshal(raw, &e)
		return fmt.Errorf("%w: supplier %s: %s %s: %s %s %s", ErrSupplier, s.ID, method, path, resp.Status, e.Error, e.ErrorMessage)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%w: supplier %s: %s %s: not an OCTO answer: %v", ErrSupplier, s.ID, method, path, err)
	}
	return nil
}

// Products lists the supplier's products (GET /products).
func (s *Supplier) Products(ctx context.Context) ([]Product, error) {
	var out []Product
	return out, s.do(ctx, http.MethodGet, "/products", nil, &out)
}

// Availability lists the slots of an option between two local dates
// (POST /availability).
func (s *Supplier) Availability(ctx context.Context, productID, optionID, from, to string) ([]Availability, error) {
	var out []Availability
	return out, s.do(ctx, http.MethodPost, "/availability", map[string]any{"productId": productID, "optionId": optionID,
		"localDateStart": from, "localDateEnd": to}, &out)
}

// Reserve holds a slot for units (POST /bookings, status ON_HOLD).
func (s *Supplier) Reserve(ctx context.Context, uuid, productID, optionID, availabilityID string, unitIDs []string) (*Booking, error) {
	items := make([]map[string]string, len(unitIDs))
	for i, u := range unitIDs {
		items[i] = map[string]string{"unitId": u}
	}
	var out Booking
	return &out, s.do(ctx, http.MethodPost, "/bookings", map[string]any{"uuid": uuid, "productId": productID, "optionId": optionID,
		"availabilityId": availabilityID, "unitItems": items}, &out)
}

// Confirm confirms a held booking (POST /bookings/{uuid}/confirm).
func (s *Supplier) Confirm(ctx context.Context, uuid, fullName, email string) (*Booking, error) {
	var out Booking
	return &out, s.do(ctx, http.MethodPost, "/bookings/"+uuid+"/confirm",
		map[string]any{"contact": map[string]string{"fullName": fullName, "emailAddress": email}}, &out)
}

// Declaration is an ATP Capability Declaration made from an OCTO option
// (the fields of services/atp/tools.Activity).
type Declaration struct {
	ActivityID         string          `json:"activity_id"`
	Title              string          `json:"title"`
	Category           string          `json:"category"`
	OperatorID         string          `json:"operator_id"`
	Location           string          `json:"location,omitempty"`
	PricingSnapshot    json.RawMessage `json:"pricing_snapshot"`
	AvailabilityStatus string          `json:"availability_status"`
	Capacity           int             `json:"capacity,omitempty"`
	Source             string          `json:"source"`
	// OCTO identifies the product, option and slot to book.
	OCTO map[string]string `json:"octo"`
}

// Search maps the supplier's options to declarations with availability on
// date (YYYY-MM-DD) for participants (0: any).
func (s *Supplier) Search(ctx context.Context, date string, participants int) ([]Declaration, error) {
	ps, err := s.Products(ctx)
	if err != nil {
		return nil, err
	}
	var out []Declaration
	for _, p := range ps {
		if len(s.ProductIDs) > 0 && !slices.Contains(s.ProductIDs, p.ID) {
			continue
		}
		for _, o := range p.Options {
			slots, err := s.Availability(ctx, p.ID, o.ID, date, date)
			if err != nil {
				return nil, err
			}
			title := p.InternalName
			if !o.Default && o.InternalName != "" {
				title += " – " + o.InternalName
			}
			status, capacity, slot := availabilityOf(slots, participants)
			d := Declaration{ActivityID: "octo:" + s.ID + ":" + p.ID + ":" + o.ID, Title: title, Category: s.Category, OperatorID: s.ID,
				Location: s.Location, PricingSnapshot: pricing(o), AvailabilityStatus: status, Capacity: capacity, Source: "OCTO_BRIDGE",
				OCTO: map[string]string{"supplier_id": s.ID, "product_id": p.ID, "option_id": o.ID, "availability_id": slot}}
			out = append(out, d)
		}
	}
	return out, nil
}

// availabilityOf maps OCTO slot statuses: AVAILABLE or FREESALE with room
// for participants → AVAILABLE, LIMITED → LIMITED, otherwise SOLD_OUT. It
// returns the best slot's id and the largest vacancy.
func availabilityOf(slots []Availability, participants int) (status string, capacity int, slot string) {
	status = "SOLD_OUT"
	rank := map[string]int{"SOLD_OUT": 0, "LIMITED": 1, "AVAILABLE": 2}
	for _, a := range slots {
		if !a.Available || a.Status == "SOLD_OUT" || a.Status == "CLOSED" {
			continue
		}
		if a.Vacancies != nil {
			if participants > 0 && *a.Vacancies < participants {
				continue
			}
			capacity = max(capacity, *a.Vacancies)
		}
		st := "AVAILABLE"
		if a.Status == "LIMITED" {
			st = "LIMITED"
		}
		if rank[st] > rank[status] {
			status, slot = st, a.ID
		}
	}
	return status, capacity, slot
}

// pricing is the option's lowest retail "from" price (octo/pricing),
// falling back to its units' prices; null without pricing.
func pricing(o Option) json.RawMessage {
	prices := o.PricingFrom
	for _, u := range o.Units {
		prices = append(prices, u.PricingFrom...)
	}
	if len(prices) == 0 {
		return json.RawMessage("null")
	}
	best := prices[0]
	for _, p := range prices[1:] {
		if p.Retail < best.Retail {
			best = p
		}
	}
	amount := float64(best.Retail) / math.Pow10(best.CurrencyPrecision)
	raw, _ := json.Marshal(map[string]any{"currency": best.Currency, "amount": amount, "per": "UNIT"})
	return raw
}

package tools_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/pkg/card"
	"github.com/utpmesh/utpmesh/services/atp/internal/atptest"
	"github.com/utpmesh/utpmesh/services/atp/octo"
	"github.com/utpmesh/utpmesh/services/atp/tools"
)

// TestSearchBridgesOCTO: atp_search_activities returns the native
// activities and those of a local fake OCTO supplier; a supplier that
// fails makes the result partial, not failed.
func TestSearchBridgesOCTO(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /products", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`[{"id":"prod-kayak","internalName":"Sea kayak tour","options":[{"id":"opt-am","default":true,"internalName":"Morning",
"units":[{"id":"unit-adult","type":"ADULT","pricingFrom":[{"original":900000,"retail":850000,"currency":"JPY","currencyPrecision":2}]}]}]}]`))
	})
	mux.HandleFunc("POST /availability", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`[{"id":"slot-1","localDateTimeStart":"2027-01-18T09:00:00+09:00","available":true,"status":"AVAILABLE","vacancies":6,"capacity":8}]`))
	})
	good := httptest.NewServer(mux)
	t.Cleanup(good.Close)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	t.Cleanup(bad.Close)

	for _, tc := range []struct {
		name      string
		suppliers []*octo.Supplier
		status    card.Status
	}{
		{"one supplier", []*octo.Supplier{{ID: "sup-kayak", BaseURL: good.URL, Category: "WATER", Location: "Otaru"}}, card.StatusSuccess},
		{"one supplier down", []*octo.Supplier{{ID: "sup-kayak", BaseURL: good.URL, Category: "WATER", Location: "Otaru"}, {ID: "sup-down", BaseURL: bad.URL}}, card.StatusPartial},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := atptest.Start(t, atptest.Options{OCTOSuppliers: tc.suppliers})
			if _, err := h.Service.LoadFixture(t.Context(), atptest.Project); err != nil {
				t.Fatal(err)
			}
			ag := h.Agent("finder", h.Mandate("finder", atptest.AllTools()))
			r := ag.Call(tools.ToolSearchActivities, map[string]any{"date": "2027-01-18"})
			if r.Status != tc.status {
				t.Fatalf("status %s, error %+v", r.Status, r.Error)
			}
			var ids, sources []string
			for _, a := range r.Value.([]any) {
				ids = append(ids, atptest.Str(a, "activity_id"))
				sources = append(sources, atptest.Str(a, "source"))
			}
			if strings.Join(ids, ",") != "act-onsen,act-ski-lesson,act-snowshoe,octo:sup-kayak:prod-kayak:opt-am" ||
				strings.Join(sources, ",") != "ATP_NATIVE,ATP_NATIVE,ATP_NATIVE,OCTO_BRIDGE" {
				t.Fatalf("ids %v sources %v", ids, sources)
			}
			wr := ag.Call(tools.ToolSearchActivities, map[string]any{"date": "2027-01-18", "category": "water"})
			water, _ := wr.Value.([]any)
			if wr.Status != tc.status || len(water) != 1 || atptest.Str(water[0], "octo", "availability_id") != "slot-1" ||
				atptest.Get(water[0], "pricing_snapshot", "amount") != float64(8500) {
				t.Fatalf("water = %s %v", wr.Status, water)
			}
		})
	}
}

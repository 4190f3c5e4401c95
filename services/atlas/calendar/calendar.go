// Package calendar is the atlas.calendar service: CALENDAR_GET_DAY,
// CALENDAR_CREATE_BLOCKS and CALENDAR_DELETE_BLOCKS over time blocks kept
// in the group's state (<DataDir>/atlas-calendar.db, or the shared KV
// bucket atlas_calendar; see package atlas).
//
// Times are "HH:MM" wall-clock times of the block's date; the service keeps
// no time zone (the caller's calendar day is the day). free_slots are the
// gaps between blocks inside the working day, 09:00–17:00 unless the
// service's Config or the call's working_hours says otherwise.
//
// CALENDAR_CREATE_BLOCKS (MEDIUM) always needs confirmation; it refuses a
// block that overlaps another (existing or in the same call) unless
// allow_overlap is true. CALENDAR_DELETE_BLOCKS (MEDIUM) needs confirmation
// when it deletes more than one block. Undo steps: create → delete with the
// block ids; delete → create with the deleted blocks' data (new ids).
package calendar

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/utpmesh/utpmesh/pkg/registry"
	"github.com/utpmesh/utpmesh/pkg/worker"
	"github.com/utpmesh/utpmesh/services/atlas"
	"github.com/utpmesh/utpmesh/services/atlas/internal/atime"
	"github.com/utpmesh/utpmesh/services/atlas/internal/kit"
	"github.com/utpmesh/utpmesh/services/atlas/receipts"
	"github.com/utpmesh/utpmesh/services/toolkit"
)

// Tool names.
const (
	ToolGetDay       = "CALENDAR_GET_DAY"
	ToolCreateBlocks = "CALENDAR_CREATE_BLOCKS"
	ToolDeleteBlocks = "CALENDAR_DELETE_BLOCKS"
)

const (
	bucketBlocks = "blocks" // block_id → Block
	bucketDays   = "days"   // date \x00 block_id → ""
)

// Block is one calendar block.
type Block struct {
	BlockID   string `json:"block_id"`
	Date      string `json:"date"`
	Title     string `json:"title"`
	Start     string `json:"start"`
	End       string `json:"end"`
	Type      string `json:"type"`
	CreatedAt string `json:"created_at"`
}

// Slot is a free interval.
type Slot struct {
	Start string `json:"start"`
	End   string `json:"end"`
}

// Config configures the service.
type Config struct {
	// WorkStart and WorkEnd bound the working day free_slots are computed
	// in (HH:MM); default 09:00 and 17:00.
	WorkStart, WorkEnd string
}

var (
	blockSchema = `{"type":"object","additionalProperties":false,"required":["title","start","end"],"properties":{
		"title":{"type":"string","minLength":1,"maxLength":500},
		"start":{"type":"string","description":"HH:MM"},"end":{"type":"string","description":"HH:MM (24:00 allowed)"},
		"type":{"type":"string","enum":["meeting","focus","task","break","personal","other"]},
		"date":{"type":"string","description":"YYYY-MM-DD; default: the call's date"}}}`
	getDayParams = `{"type":"object","additionalProperties":false,"required":["date"],"properties":{
	"date":{"type":"string","description":"YYYY-MM-DD"},
	"working_hours":{"type":"object","additionalProperties":false,"required":["start","end"],"properties":{"start":{"type":"string"},"end":{"type":"string"}}}}}`
	createParams = `{"type":"object","additionalProperties":false,"required":["date","blocks"],"properties":{
	"date":{"type":"string","description":"YYYY-MM-DD"},
	"blocks":{"type":"array","minItems":1,"maxItems":100,"items":` + blockSchema + `},
	"allow_overlap":{"type":"boolean","description":"create blocks even when they overlap others (default false: refuse)"}}}`
	deleteParams = `{"type":"object","additionalProperties":false,"required":["block_ids"],"properties":{
	"block_ids":{"type":"array","minItems":1,"maxItems":100,"uniqueItems":true,"items":{"type":"string","minLength":1}}}}`
)

// Service is the running atlas.calendar service.
type Service struct {
	*kit.Service
	tools []worker.Tool
}

// Open opens the service with the default Config.
func Open(deps atlas.Deps) (*Service, error) { return OpenWith(deps, Config{}) }

// OpenWith opens the service's data file and builds its tools.
func OpenWith(deps atlas.Deps, cfg Config) (*Service, error) {
	if cfg.WorkStart == "" {
		cfg.WorkStart = "09:00"
	}
	if cfg.WorkEnd == "" {
		cfg.WorkEnd = "17:00"
	}
	ws, err := atime.ParseHM("work start", cfg.WorkStart, false)
	if err != nil {
		return nil, err
	}
	we, err := atime.ParseHM("work end", cfg.WorkEnd, true)
	if err != nil {
		return nil, err
	}
	if we <= ws {
		return nil, fmt.Errorf("calendar: the working day ends (%s) before it starts (%s)", cfg.WorkEnd, cfg.WorkStart)
	}
	ks, err := kit.New(atlas.GroupCalendar, deps)
	if err != nil {
		return nil, err
	}
	c := &cal{ws: ws, we: we}
	tools, err := ks.Tools(
		kit.Spec{Name: ToolGetDay, Description: "Returns a day's blocks and the free slots within the working day (default " + cfg.WorkStart + "-" + cfg.WorkEnd + ", or working_hours).", Params: getDayParams, Risk: registry.RiskLow, ReadOnly: true, Run: c.getDay},
		kit.Spec{Name: ToolCreateBlocks, Description: "Creates calendar blocks on a date. Requires confirmation (the call returns PENDING_CONFIRM; confirm with ATLAS_CONFIRM). Refuses overlaps unless allow_overlap. Undo: CALENDAR_DELETE_BLOCKS.", Params: createParams,
			Risk: registry.RiskMedium, Confirmation: registry.ConfirmAlways, Plan: c.planCreate, Run: c.create},
		kit.Spec{Name: ToolDeleteBlocks, Description: "Deletes calendar blocks by id; returns deleted_data. Requires confirmation for more than one block. Undo: CALENDAR_CREATE_BLOCKS with the deleted data.", Params: deleteParams,
			Risk: registry.RiskMedium, Confirmation: registry.ConfirmWhenMultiple, Count: countIDs, Plan: c.planDelete, Run: c.remove},
	)
	if err != nil {
		_ = ks.Close()
		return nil, err
	}
	return &Service{Service: ks, tools: tools}, nil
}

// Tools are the service's worker tools.
func (s *Service) Tools() []worker.Tool { return s.tools }

// Build is the catalogue factory.
func Build(deps atlas.Deps) ([]worker.Tool, error) { return kit.Build(Open, deps) }

type cal struct{ ws, we int }

func countIDs(args json.RawMessage) int {
	var a struct {
		BlockIDs []string `json:"block_ids"`
	}
	_ = json.Unmarshal(args, &a)
	return len(a.BlockIDs)
}

// dayBlocks returns the blocks of a date sorted by start, end, id.
func dayBlocks(x *kit.Exec, date string) ([]Block, error) {
	days, blocks := x.Bucket(bucketDays), x.Bucket(bucketBlocks)
	out := []Block{}
	prefix := date + "\x00"
	err := days.Scan(prefix, false, func(k string, _ []byte) error {
		var b Block
		found, err := toolkit.GetJSON(blocks, k[len(prefix):], &b)
		if found {
			out = append(out, b)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Start != out[j].Start {
			return out[i].Start < out[j].Start
		}
		if out[i].End != out[j].End {
			return out[i].End < out[j].End
		}
		return out[i].BlockID < out[j].BlockID
	})
	return out, nil
}

// FreeSlots returns the gaps between blocks within [ws, we) (minutes).
func FreeSlots(blocks []Block, ws, we int) []Slot {
	type iv struct{ s, e int }
	var busy []iv
	for _, b := range blocks {
		s, _ := atime.ParseHM("start", b.Start, false)
		e, _ := atime.ParseHM("end", b.End, true)
		busy = append(busy, iv{max(s, ws), min(e, we)})
	}
	sort.Slice(busy, func(i, j int) bool { return busy[i].s < busy[j].s })
	slots := []Slot{}
	at := ws
	for _, b := range busy {
		if b.e <= b.s {
			continue
		}
		if b.s > at {
			slots = append(slots, Slot{atime.FormatHM(at), atime.FormatHM(b.s)})
		}
		at = max(at, b.e)
	}
	if at < we {
		slots = append(slots, Slot{atime.FormatHM(at), atime.FormatHM(we)})
	}
	return slots
}

func (c *cal) getDay(x *kit.Exec) (kit.Outcome, error) {
	var a struct {
		Date         string `json:"date"`
		WorkingHours *Slot  `json:"working_hours"`
	}
	if err := x.Bind(&a); err != nil {
		return kit.Outcome{}, err
	}
	if _, err := atime.ParseDate("date", a.Date); err != nil {
		return kit.Outcome{}, toolkit.BadRequest("%v", err)
	}
	ws, we := c.ws, c.we
	if a.WorkingHours != nil {
		var err error
		if ws, err = atime.ParseHM("working_hours.start", a.WorkingHours.Start, false); err != nil {
			return kit.Outcome{}, toolkit.BadRequest("%v", err)
		}
		if we, err = atime.ParseHM("working_hours.end", a.WorkingHours.End, true); err != nil {
			return kit.Outcome{}, toolkit.BadRequest("%v", err)
		}
		if we <= ws {
			return kit.Outcome{}, toolkit.BadRequest("working_hours: end %s is not after start %s", a.WorkingHours.End, a.WorkingHours.Start)
		}
	}
	blocks, err := dayBlocks(x, a.Date)
	if err != nil {
		return kit.Outcome{}, err
	}
	return kit.Outcome{Result: map[string]any{"date": a.Date, "blocks": blocks, "free_slots": FreeSlots(blocks, ws, we)}}, nil
}

type newBlock struct {
	Title string `json:"title"`
	Start string `json:"start"`
	End   string `json:"end"`
	Type  string `json:"type"`
	Date  string `json:"date"`
}

type createArgs struct {
	Date         string     `json:"date"`
	Blocks       []newBlock `json:"blocks"`
	AllowOverlap bool       `json:"allow_overlap"`
}

// plan validates a create and returns the blocks it would write.
func (c *cal) plan(x *kit.Exec) ([]Block, error) {
	var a createArgs
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	if _, err := atime.ParseDate("date", a.Date); err != nil {
		return nil, toolkit.BadRequest("%v", err)
	}
	type span struct {
		s, e int
		b    Block
	}
	byDate := map[string][]span{}
	var out []Block
	for i, nb := range a.Blocks {
		f := fmt.Sprintf("blocks[%d]", i)
		if nb.Date == "" {
			nb.Date = a.Date
		} else if _, err := atime.ParseDate(f+".date", nb.Date); err != nil {
			return nil, toolkit.BadRequest("%v", err)
		}
		s, err := atime.ParseHM(f+".start", nb.Start, false)
		if err != nil {
			return nil, toolkit.BadRequest("%v", err)
		}
		e, err := atime.ParseHM(f+".end", nb.End, true)
		if err != nil {
			return nil, toolkit.BadRequest("%v", err)
		}
		if e <= s {
			return nil, toolkit.BadRequest("%s: end %s is not after start %s; a block must end after it starts", f, nb.End, nb.Start)
		}
		if nb.Type == "" {
			nb.Type = "other"
		}
		b := Block{BlockID: x.ID("block", i), Date: nb.Date, Title: nb.Title, Start: nb.Start, End: nb.End, Type: nb.Type, CreatedAt: x.Now()}
		if _, seen := byDate[nb.Date]; !seen {
			existing, err := dayBlocks(x, nb.Date)
			if err != nil {
				return nil, err
			}
			for _, eb := range existing {
				es, _ := atime.ParseHM("start", eb.Start, false)
				ee, _ := atime.ParseHM("end", eb.End, true)
				byDate[nb.Date] = append(byDate[nb.Date], span{es, ee, eb})
			}
		}
		if !a.AllowOverlap {
			for _, o := range byDate[nb.Date] {
				if o.b.BlockID != b.BlockID && s < o.e && o.s < e {
					return nil, toolkit.BadRequest("%s %q (%s %s-%s) overlaps block %s %q (%s-%s); pick another time, or pass allow_overlap: true to create it anyway",
						f, nb.Title, nb.Date, nb.Start, nb.End, o.b.BlockID, o.b.Title, o.b.Start, o.b.End)
				}
			}
		}
		byDate[nb.Date] = append(byDate[nb.Date], span{s, e, b})
		out = append(out, b)
	}
	return out, nil
}

func (c *cal) planCreate(x *kit.Exec) (any, error) {
	blocks, err := c.plan(x)
	if err != nil {
		return nil, err
	}
	return map[string]any{"action": "create calendar blocks", "blocks": blocks}, nil
}

func (c *cal) create(x *kit.Exec) (kit.Outcome, error) {
	blocks, err := c.plan(x)
	if err != nil {
		return kit.Outcome{}, err
	}
	bb := x.Bucket(bucketBlocks)
	days := x.Bucket(bucketDays)
	created := []map[string]string{}
	ids := []string{}
	var changes []receipts.Change
	for _, b := range blocks {
		if _, err := toolkit.PutNew(bb, b.BlockID, b, x.ToolCallID); err != nil {
			return kit.Outcome{}, err
		}
		if err := days.Put(b.Date+"\x00"+b.BlockID, nil); err != nil {
			return kit.Outcome{}, err
		}
		created = append(created, map[string]string{"block_id": b.BlockID, "title": b.Title, "date": b.Date, "start": b.Start, "end": b.End})
		ids = append(ids, b.BlockID)
		changes = append(changes, receipts.Change{Op: "create", Kind: "block", ID: b.BlockID, After: toolkit.Raw(b)})
	}
	return kit.Outcome{
		Result:  map[string]any{"created": created},
		Undo:    &receipts.Undo{ToolName: ToolDeleteBlocks, Args: toolkit.Raw(map[string]any{"block_ids": ids})},
		Changes: changes,
	}, nil
}

// lookup loads the blocks of a delete call.
func lookup(x *kit.Exec) ([]Block, error) {
	var a struct {
		BlockIDs []string `json:"block_ids"`
	}
	if err := x.Bind(&a); err != nil {
		return nil, err
	}
	bb := x.Bucket(bucketBlocks)
	var out []Block
	for _, id := range a.BlockIDs {
		var b Block
		found, err := toolkit.GetJSON(bb, id, &b)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, toolkit.BadRequest("block_ids: no block %q in project %s (CALENDAR_GET_DAY lists a day's block ids); nothing was deleted", id, x.Project)
		}
		out = append(out, b)
	}
	return out, nil
}

func (c *cal) planDelete(x *kit.Exec) (any, error) {
	blocks, err := lookup(x)
	if err != nil {
		return nil, err
	}
	return map[string]any{"action": "delete calendar blocks", "blocks": blocks}, nil
}

func (c *cal) remove(x *kit.Exec) (kit.Outcome, error) {
	blocks, err := lookup(x)
	if err != nil {
		return kit.Outcome{}, err
	}
	bb := x.Bucket(bucketBlocks)
	days := x.Bucket(bucketDays)
	ids := []string{}
	recreate := []newBlock{}
	var changes []receipts.Change
	for _, b := range blocks {
		if err := bb.Delete(b.BlockID); err != nil {
			return kit.Outcome{}, err
		}
		if err := days.Delete(b.Date + "\x00" + b.BlockID); err != nil {
			return kit.Outcome{}, err
		}
		ids = append(ids, b.BlockID)
		recreate = append(recreate, newBlock{Title: b.Title, Start: b.Start, End: b.End, Type: b.Type, Date: b.Date})
		changes = append(changes, receipts.Change{Op: "delete", Kind: "block", ID: b.BlockID, Before: toolkit.Raw(b)})
	}
	return kit.Outcome{
		Result:  map[string]any{"deleted": ids, "deleted_data": blocks},
		Undo:    &receipts.Undo{ToolName: ToolCreateBlocks, Args: toolkit.Raw(createArgs{Date: blocks[0].Date, Blocks: recreate})},
		Changes: changes,
	}, nil
}

package boltinbox

import (
	"reflect"
	"testing"
	"time"
)

// TestRecordDetached: detached copies every field of a record that could
// share memory (the memo's records and the callers' change independently);
// a new pointer, slice or map field in inbox.Entry fails here until
// detached copies it.
func TestRecordDetached(t *testing.T) {
	copied := map[string]bool{"AckedAt": true, "WakeupSentAt": true}
	var walk func(reflect.Type)
	walk = func(rt reflect.Type) {
		for i := range rt.NumField() {
			f := rt.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			switch f.Type.Kind() {
			case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface, reflect.Chan, reflect.Func:
				if !copied[f.Name] {
					t.Errorf("record field %s (%s) shares memory and detached does not copy it", f.Name, f.Type)
				}
			}
		}
	}
	walk(reflect.TypeOf(record{}))

	at, sent := time.Unix(1, 0).UTC(), time.Unix(2, 0).UTC()
	r := record{Seq: 7}
	r.AckedAt, r.WakeupSentAt = &at, &sent
	d := r.detached()
	*d.AckedAt, *d.WakeupSentAt = time.Unix(3, 0), time.Unix(4, 0)
	if !r.AckedAt.Equal(time.Unix(1, 0)) || !r.WakeupSentAt.Equal(time.Unix(2, 0)) || d.Seq != 7 {
		t.Fatalf("changing the copy changed the original: acked %v, sent %v", r.AckedAt, r.WakeupSentAt)
	}
}

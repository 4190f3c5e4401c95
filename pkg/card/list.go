package card

import (
	"bytes"
	"encoding/json"
)

// ParseList decodes the JSON array of cards at the start of data (white
// space before it allowed), like json.Unmarshal into a []*Card, without
// validating the cards, and returns how many bytes of data the array
// took. It reads the array and each card in one pass with Parse's fast
// path; input that path does not handle goes to encoding/json, which also
// gives the error messages. A null element is a nil card, as with
// json.Unmarshal; a null array is a nil slice.
//
// It is for a reply that carries a page of a CardStore's canonical card
// encodings, which the caller would otherwise decode with encoding/json's
// separate validation pass first (natsstore's list_turn).
func ParseList(data []byte) ([]*Card, int, error) {
	r := reader{data: data}
	if cards, ok := parseList(&r); ok {
		return cards, r.pos, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var cards []*Card
	if err := dec.Decode(&cards); err != nil {
		return nil, 0, err
	}
	return cards, int(dec.InputOffset()), nil
}

// parseList is ParseList's fast path; false means "use encoding/json".
func parseList(r *reader) ([]*Card, bool) {
	switch r.peek() {
	case 'n':
		return nil, r.literal("null")
	case '[':
		r.pos++
	default:
		return nil, false
	}
	cards := []*Card{}
	if r.peek() == ']' {
		r.pos++
		return cards, true
	}
	for {
		if r.peek() == 0 {
			return nil, false
		}
		start := r.pos
		if !r.skip(0) {
			return nil, false
		}
		var c *Card
		if elem := r.data[start:r.pos]; !bytes.Equal(elem, []byte("null")) {
			c = new(Card)
			if !parseCard(elem, c) {
				return nil, false
			}
		}
		cards = append(cards, c)
		switch r.peek() {
		case ',':
			r.pos++
		case ']':
			r.pos++
			return cards, true
		default:
			return nil, false
		}
	}
}

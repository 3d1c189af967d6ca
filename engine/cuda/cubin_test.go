package cuda

import (
	"reflect"
	"strings"
	"testing"
)

// TestParseNVInfo splits .nv.info sections as NVRTC 11.8 writes them
// (the records below are from its CUBIN of swiglu_backward and of the
// global section): word-sized records without a payload, and records with
// one; a truncated record is an error.
func TestParseNVInfo(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []byte
		want []nvInfoRecord
		err  string
	}{
		{"empty", nil, nil, ""},
		{"value and no value", []byte{0x03, 0x19, 0x58, 0x00, 0x01, 0x35, 0x00, 0x00},
			[]nvInfoRecord{{attr: 0x19}, {attr: 0x35}}, ""},
		{"register count", []byte{0x04, 0x2f, 0x08, 0x00, 0x85, 0, 0, 0, 0x26, 0, 0, 0},
			[]nvInfoRecord{{attr: eiattrRegCount, payload: []byte{0x85, 0, 0, 0, 0x26, 0, 0, 0}}}, ""},
		{"launch bounds", []byte{0x04, 0x05, 0x0c, 0x00, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0},
			[]nvInfoRecord{{attr: eiattrMaxThreads, payload: []byte{0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0}}}, ""},
		{"truncated payload", []byte{0x04, 0x2f, 0x08, 0x00, 0x85, 0}, nil, "6 left"},
		{"truncated length", []byte{0x04, 0x2f, 0x08}, nil, "truncated length"},
		{"truncated record", []byte{0x03}, nil, "truncated record"},
		{"unknown format", []byte{0x07, 0x2f, 0, 0}, nil, "unknown format"},
	} {
		got, err := parseNVInfo(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v (%v), want %v", c.name, got, err, c.want)
		}
	}
	if _, err := cubinKernelAttrs([]byte("not an ELF image at all")); err == nil {
		t.Error("cubinKernelAttrs accepted a file that is not ELF")
	}
}

package cuda

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"strings"
)

// kernelAttrs are what a CUBIN records of one compiled kernel in its
// .nv.info sections: the registers a thread uses, the most threads a
// block may have (__launch_bounds__, or 0 when the kernel has none), and
// its stack frame in bytes — local memory, nonzero when registers
// spilled or an array did not fit them.
type kernelAttrs struct {
	Registers, MaxThreads, FrameBytes int
}

// The .nv.info records this file reads (NVIDIA's EIATTR numbering, as
// cuobjdump names them) and their formats.
const (
	// Every record starts with its format and attribute bytes and two
	// more: nothing (NVAL; a word, as records are word-aligned), a value
	// (BVAL, HVAL), or the length of the payload that follows (SVAL).
	eifmtNVal = 0x01
	eifmtBVal = 0x02
	eifmtHVal = 0x03
	eifmtSVal = 0x04

	eiattrMaxThreads = 0x05 // per kernel: x, y, z
	eiattrFrameSize  = 0x11 // symbol, bytes
	eiattrRegCount   = 0x2f // symbol, registers
)

// nvInfoRecord is one attribute of an .nv.info section.
type nvInfoRecord struct {
	attr    byte
	payload []byte // the value of an SVAL record; nil for the others
}

// parseNVInfo splits an .nv.info section into its records.
func parseNVInfo(b []byte) ([]nvInfoRecord, error) {
	var recs []nvInfoRecord
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, fmt.Errorf("truncated record of %d bytes", len(b))
		}
		format, attr := b[0], b[1]
		n := 0
		switch format {
		case eifmtNVal, eifmtBVal, eifmtHVal:
			n = 4
		case eifmtSVal:
			if len(b) < 4 {
				return nil, fmt.Errorf("attribute %#x: truncated length", attr)
			}
			n = 4 + int(binary.LittleEndian.Uint16(b[2:4]))
		default:
			return nil, fmt.Errorf("attribute %#x: unknown format %#x", attr, format)
		}
		if len(b) < n {
			return nil, fmt.Errorf("attribute %#x: %d bytes, %d left", attr, n, len(b))
		}
		r := nvInfoRecord{attr: attr}
		if format == eifmtSVal {
			r.payload = b[4:n]
		}
		recs = append(recs, r)
		b = b[n:]
	}
	return recs, nil
}

// cubinKernelAttrs reads every kernel's attributes from a CUBIN (an ELF
// image): the global .nv.info section's per-symbol records (registers,
// frame) and each kernel's own .nv.info.<name> (its launch bounds).
func cubinKernelAttrs(img []byte) (map[string]kernelAttrs, error) {
	if len(img) < 24 || !bytes.HasPrefix(img, []byte(elf.ELFMAG)) {
		return nil, fmt.Errorf("cuda: CUBIN: not an ELF image")
	}
	// NVIDIA keeps its ABI version where ELF has its own version (the
	// identification's EI_VERSION byte and e_version), which debug/elf
	// refuses: a copy says version 1 instead.
	img = bytes.Clone(img)
	img[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	binary.LittleEndian.PutUint32(img[20:24], uint32(elf.EV_CURRENT))
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		return nil, fmt.Errorf("cuda: CUBIN: %w", err)
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("cuda: CUBIN: symbols: %w", err)
	}
	// symbol returns the name of ELF symbol i (debug/elf leaves out the
	// null symbol 0).
	symbol := func(i uint32) (string, error) {
		if i == 0 || int(i) > len(syms) {
			return "", fmt.Errorf("symbol %d of %d", i, len(syms))
		}
		return syms[i-1].Name, nil
	}
	attrs := map[string]kernelAttrs{}
	for _, s := range f.Sections {
		if s.Name != ".nv.info" && !strings.HasPrefix(s.Name, ".nv.info.") {
			continue
		}
		data, err := s.Data()
		if err != nil {
			return nil, fmt.Errorf("cuda: CUBIN: %s: %w", s.Name, err)
		}
		recs, err := parseNVInfo(data)
		if err != nil {
			return nil, fmt.Errorf("cuda: CUBIN: %s: %w", s.Name, err)
		}
		own := strings.TrimPrefix(s.Name, ".nv.info.")
		for _, r := range recs {
			switch r.attr {
			case eiattrRegCount, eiattrFrameSize:
				if len(r.payload) != 8 {
					return nil, fmt.Errorf("cuda: CUBIN: %s: attribute %#x of %d bytes, want 8", s.Name, r.attr, len(r.payload))
				}
				name, err := symbol(binary.LittleEndian.Uint32(r.payload))
				if err != nil {
					return nil, fmt.Errorf("cuda: CUBIN: %s: attribute %#x: %w", s.Name, r.attr, err)
				}
				a, v := attrs[name], int(binary.LittleEndian.Uint32(r.payload[4:]))
				if r.attr == eiattrRegCount {
					a.Registers = v
				} else {
					a.FrameBytes = v
				}
				attrs[name] = a
			case eiattrMaxThreads:
				if own == s.Name || len(r.payload) != 12 {
					return nil, fmt.Errorf("cuda: CUBIN: %s: launch bounds of %d bytes outside a kernel's section", s.Name, len(r.payload))
				}
				a := attrs[own]
				a.MaxThreads = 1
				for i := 0; i < 3; i++ {
					a.MaxThreads *= int(binary.LittleEndian.Uint32(r.payload[4*i:]))
				}
				attrs[own] = a
			}
		}
	}
	return attrs, nil
}

package cuda

import "slices"

// deviceTable is the table of tensors a multi-tensor kernel reads
// (adamw_multi, sum_squares_multi_*): a few int64 fields a tensor —
// addresses, lengths, types, offsets — built on the host each call and
// uploaded to a scratch buffer of its own only when it differs from the
// one there. A training step passes the same tensors step after step, so
// in a steady state the table stays on the device and costs no transfer
// (a host-to-device copy from pageable memory waits for the host).
type deviceTable struct {
	host     []int64 // the table being built, reused
	uploaded []int64 // the table in the buffer at dev
	dev      devptr
}

// reset empties the host table for a new call, keeping its memory.
func (t *deviceTable) reset() []int64 { return t.host[:0] }

// uploadTable makes rows (built from t.reset()) the table and returns its
// device address in scratch buffer scratch (the table's own: scratchAdamW,
// …), copying it there only when it changed. On the worker thread.
func (b *Backend) uploadTable(t *deviceTable, scratch int, rows []int64) devptr {
	t.host = rows
	bytes := uint64(len(rows)) * 8
	dev := b.scratchBuffer(scratch, bytes)
	if dev != t.dev || !slices.Equal(rows, t.uploaded) {
		b.copyToDevice(dev, pointerTo(rows), bytes)
		t.dev, t.uploaded = dev, append(t.uploaded[:0], rows...)
	}
	return dev
}

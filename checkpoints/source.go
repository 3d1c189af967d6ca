package checkpoints

import "fmt"

// A Source is a checkpoint opened to be written out in another layout (an
// HF folder, Export; a GGUF file, checkpoints/gguf): its configuration and
// its weights read a block of whole rows at a time, with a LoRA adapter
// merged into the weights it adapts.
type Source struct {
	*Checkpoint
	adapter *Adapter
	merge   map[string]mergeTarget // the adapted weights, with adapter
	dtype   DType                  // the output's, for the merge's one rounding
}

// OpenSource opens the checkpoint in folder src (an HF checkpoint or a
// sharded training checkpoint saved on any grid). ad, if not nil, is a LoRA
// adapter of it to merge in: W + s·B·A in float64 from the stored W,
// rounded once to dtype (merge.go), the type the caller writes the values
// as (F32 for any type that rounds from float32 itself).
func OpenSource(src string, ad *Adapter, dtype DType) (*Source, error) {
	ck, err := Open(src)
	if err != nil {
		return nil, err
	}
	var merge map[string]mergeTarget
	if ad != nil {
		if err = checkMergeable(src, ck.Config, ad); err == nil {
			merge, err = mergeTargets(ck.Config, ad)
		}
		if err != nil {
			ck.Close()
			return nil, err
		}
	}
	return &Source{Checkpoint: ck, adapter: ad, merge: merge, dtype: dtype}, nil
}

// ReadRows reads rows [r0, r1) of the named weight (a vector is one row),
// as float32, merged with its adapter when it has one.
func (s *Source) ReadRows(name string, r0, r1 int) ([]float32, error) {
	info, ok := s.Weights.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("checkpoints: %s: no tensor %q", s.Dir, name)
	}
	rows, cols, ok := matrixDims(info.Shape)
	if !ok || r0 < 0 || r1 < r0 || r1 > rows {
		return nil, fmt.Errorf("checkpoints: %s: tensor %q of shape %v: rows %d…%d", s.Dir, name, info.Shape, r0, r1)
	}
	v, err := s.Weights.ReadBlock(name, r0, r1, 0, cols, 0, (r1-r0)*cols)
	if err != nil {
		return nil, err
	}
	if m, ok := s.merge[name]; ok {
		ac := s.adapter.Config
		v = MergeRows(v, m.a, m.b, r0, r1, cols, ac.R, ac.Scale(), s.dtype)
	}
	return v, nil
}

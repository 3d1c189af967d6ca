package checkpoints

import (
	"fmt"
	"testing"
)

// TestLlamaDeclaration: every tensor of a Llama model carries the role and
// split of AxoNN's layout (the linears that take the residual stream and
// the vocabulary matrices by rows over Y, the "transposed" o_proj and
// down_proj by rows over X, the RMSNorm weights over X), its layer, a
// split of its rank, and the parameter counts are the declared tensors'.
func TestLlamaDeclaration(t *testing.T) {
	type decl struct {
		role  Role
		split Split
	}
	want := map[string]decl{
		EmbedTokensName: {RoleEmbedding, SplitRowsY},
		FinalNormName:   {RoleFinalNorm, SplitVectorX},
		LMHeadName:      {RoleHead, SplitRowsY},
	}
	layer := map[string]decl{
		"self_attn.q_proj": {RoleAttnQ, SplitRowsY}, "self_attn.k_proj": {RoleAttnK, SplitRowsY},
		"self_attn.v_proj": {RoleAttnV, SplitRowsY}, "self_attn.o_proj": {RoleAttnO, SplitRowsX},
		"mlp.gate_proj": {RoleMLPGate, SplitRowsY}, "mlp.up_proj": {RoleMLPUp, SplitRowsY},
		"mlp.down_proj":   {RoleMLPDown, SplitRowsX},
		"input_layernorm": {RoleAttnNorm, SplitVectorX}, "post_attention_layernorm": {RoleMLPNorm, SplitVectorX},
	}
	for _, tied := range []bool{false, true} {
		c := tinyConfig(tied)
		layers := map[string]int{}
		for l := range c.NumHiddenLayers {
			for m, d := range layer {
				want[LayerTensorName(l, m)] = d
				layers[LayerTensorName(l, m)] = l
			}
		}
		specs := c.TensorSpecs()
		if n := len(want) - len(specs); n != 0 && !(tied && n == 1) {
			t.Errorf("tied=%v: %d tensors, want %d", tied, len(specs), len(want))
		}
		var total int64
		for _, s := range specs {
			w, ok := want[s.Name]
			if !ok {
				t.Errorf("tied=%v: undeclared tensor %s", tied, s.Name)
				continue
			}
			if s.Role != w.role || s.Split != w.split {
				t.Errorf("%s: %v, %v; want %v, %v", s.Name, s.Role, s.Split, w.role, w.split)
			}
			if l, ok := layers[s.Name]; (ok && s.Layer != l) || (!ok && s.Layer != -1) {
				t.Errorf("%s: layer %d", s.Name, s.Layer)
			}
			if d := s.Split.Dims(); d != len(s.Shape) {
				t.Errorf("%s of shape %v: split %v is for %d dimensions", s.Name, s.Shape, s.Split, d)
			}
			if s.Role.Norm() == s.Role.Matrix() {
				t.Errorf("%s: role %v is a norm %v and a matrix %v", s.Name, s.Role, s.Role.Norm(), s.Role.Matrix())
			}
			total += s.Elements()
		}
		if got := c.Params().Total; got != total {
			t.Errorf("tied=%v: Params().Total %d, the declared tensors hold %d", tied, got, total)
		}
	}
}

// TestAdapterDeclaration: adapters are declared replicated (the engine
// keeps them whole on every rank), with their layer and roles.
func TestAdapterDeclaration(t *testing.T) {
	c := tinyConfig(false)
	for i, s := range c.AdapterTensorSpecs(testAdapterConfig()) {
		role := []Role{RoleLoRAA, RoleLoRAB}[i%2]
		if s.Role != role || s.Split != SplitReplicated || s.Layer < 0 || s.Layer >= c.NumHiddenLayers {
			t.Errorf("%s: %v, %v, layer %d; want %v, replicated", s.Name, s.Role, s.Split, s.Layer, role)
		}
	}
}

// TestSplitsAndRoles: every split names its axes as its doc says, only
// matrices chunk over Z, and every role and split has a name.
func TestSplitsAndRoles(t *testing.T) {
	for _, c := range []struct {
		s          Split
		rows, cols Axis
		z          bool
		dims       int
	}{
		{SplitRowsY, AxisY, AxisX, true, 2},
		{SplitRowsX, AxisX, AxisY, true, 2},
		{SplitVectorX, AxisNone, AxisX, false, 1},
		{SplitVectorY, AxisNone, AxisY, false, 1},
		{SplitReplicated, AxisNone, AxisNone, false, 0},
	} {
		if r, cl := c.s.Axes(); r != c.rows || cl != c.cols || c.s.ChunksZ() != c.z || c.s.Dims() != c.dims || !c.s.Valid() {
			t.Errorf("%v: axes %v, %v, Z %v, dims %d", c.s, r, cl, c.s.ChunksZ(), c.s.Dims())
		}
	}
	if Split(0).Valid() || Role(0).Valid() || splitCount.Valid() || roleCount.Valid() {
		t.Error("an undeclared split or role is valid")
	}
	for r := roleUndeclared + 1; r < roleCount; r++ {
		if r.String() == "" || r.String() == fmt.Sprintf("Role(%d)", uint8(r)) {
			t.Errorf("role %d has no name", r)
		}
	}
}

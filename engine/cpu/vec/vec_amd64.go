//go:build amd64 && !purego

package vec

import (
	"os"

	"golang.org/x/sys/cpu"
)

// level is the implementation in use: AVX-512 where the CPU and OS
// support it (every AVX-512 CPU also has FMA), else AVX2 with FMA, else
// Go; MEMTRAIN_VEC may ask for a lesser one.
var level = chooseLevel(os.Getenv("MEMTRAIN_VEC"))

// chooseLevel is the best level, or the one named (go, avx2) if this
// machine can run it.
func chooseLevel(name string) int {
	for _, l := range levels() {
		if levelNames[l] == name {
			return l
		}
	}
	return bestLevel()
}

func bestLevel() int {
	switch {
	case cpu.X86.HasAVX512F:
		return levelAVX512
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return levelAVX2
	}
	return levelGo
}

// levels lists the implementations this machine can run, best first.
func levels() []int {
	var ls []int
	for l := bestLevel(); l > levelGo; l-- {
		if l == levelAVX2 && !(cpu.X86.HasAVX2 && cpu.X86.HasFMA) {
			continue
		}
		ls = append(ls, l)
	}
	return append(ls, levelGo)
}

// The kernels below dispatch to the assembly of the current level. The
// exponential ones take n a multiple of 16 (at least 16); the others n a
// multiple of 16 except dotKernel, which takes any n ≥ 1.

func expBlocks(dst, src *float32, n int) {
	if level == levelAVX512 {
		expAVX512(dst, src, n)
	} else {
		expAVX2(dst, src, n)
	}
}

func expSumBlocks(dst, src *float32, n int, shift float32, acc *[block]float64) {
	if level == levelAVX512 {
		expSumAVX512(dst, src, n, shift, acc)
	} else {
		expSumAVX2(dst, src, n, shift, acc)
	}
}

func swigluBlocks(out, g, u *float32, n int) {
	if level == levelAVX512 {
		swigluAVX512(out, g, u, n)
	} else {
		swigluAVX2(out, g, u, n)
	}
}

func swigluBackwardBlocks(dg, du, do, g, u *float32, n int) {
	if level == levelAVX512 {
		swigluBackwardAVX512(dg, du, do, g, u, n)
	} else {
		swigluBackwardAVX2(dg, du, do, g, u, n)
	}
}

func dotKernel(a, b *float32, n int) float32 {
	if level == levelAVX512 {
		return dotAVX512(a, b, n)
	}
	return dotAVX2(a, b, n)
}

func axpyKernel(alpha float32, x, y *float32, n int) {
	if level == levelAVX512 {
		axpyAVX512(alpha, x, y, n)
	} else {
		axpyAVX2(alpha, x, y, n)
	}
}

func scaleKernel(alpha float32, x *float32, n int) {
	if level == levelAVX512 {
		scaleAVX512(alpha, x, n)
	} else {
		scaleAVX2(alpha, x, n)
	}
}

func subMulKernel(d *float32, s float32, p *float32, n int) {
	if level == levelAVX512 {
		subMulAVX512(d, s, p, n)
	} else {
		subMulAVX2(d, s, p, n)
	}
}

func maxKernel(x *float32, n int) float32 {
	if level == levelAVX512 {
		return maxAVX512(x, n)
	}
	return maxAVX2(x, n)
}

//go:noescape
func expAVX512(dst, src *float32, n int)

//go:noescape
func widenBF16AVX512(dst *float32, src *uint16, n int)

//go:noescape
func roundBF16AVX512(dst *uint16, src *float32, n int)

//go:noescape
func expSumAVX512(dst, src *float32, n int, shift float32, acc *[block]float64)

//go:noescape
func swigluAVX512(out, gate, up *float32, n int)

//go:noescape
func swigluBackwardAVX512(dg, du, do, gate, up *float32, n int)

//go:noescape
func dotAVX512(a, b *float32, n int) float32

//go:noescape
func axpyAVX512(alpha float32, x, y *float32, n int)

//go:noescape
func scaleAVX512(alpha float32, x *float32, n int)

//go:noescape
func subMulAVX512(d *float32, s float32, p *float32, n int)

//go:noescape
func maxAVX512(x *float32, n int) float32

//go:noescape
func expAVX2(dst, src *float32, n int)

//go:noescape
func expSumAVX2(dst, src *float32, n int, shift float32, acc *[block]float64)

//go:noescape
func swigluAVX2(out, gate, up *float32, n int)

//go:noescape
func swigluBackwardAVX2(dg, du, do, gate, up *float32, n int)

//go:noescape
func dotAVX2(a, b *float32, n int) float32

//go:noescape
func axpyAVX2(alpha float32, x, y *float32, n int)

//go:noescape
func scaleAVX2(alpha float32, x *float32, n int)

//go:noescape
func subMulAVX2(d *float32, s float32, p *float32, n int)

//go:noescape
func maxAVX2(x *float32, n int) float32

// adamwKernel is AdamW's body for n a positive multiple of 8, in AVX2 at
// either level (the step is memory bound: wider vectors gain nothing).
func adamwKernel(p, g, m, v *float32, n int, c *AdamWStep) { adamwAVX2(p, g, m, v, n, c) }

//go:noescape
func adamwAVX2(p, grad, m, v *float32, n int, c *AdamWStep)

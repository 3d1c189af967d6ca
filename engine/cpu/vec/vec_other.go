//go:build !amd64 || purego

package vec

// level is always Go here: there is no assembly.
var level = levelGo

// levels lists the implementations this build can run.
func levels() []int { return []int{levelGo} }

// The kernels are never called at levelGo.

func expBlocks(dst, src *float32, n int)                                        { unreachable() }
func expSumBlocks(dst, src *float32, n int, shift float32, acc *[block]float64) { unreachable() }
func swigluBlocks(out, g, u *float32, n int)                                    { unreachable() }
func swigluBackwardBlocks(dg, du, do, g, u *float32, n int)                     { unreachable() }
func dotKernel(a, b *float32, n int) float32                                    { unreachable(); return 0 }
func axpyKernel(alpha float32, x, y *float32, n int)                            { unreachable() }
func scaleKernel(alpha float32, x *float32, n int)                              { unreachable() }
func subMulKernel(d *float32, s float32, p *float32, n int)                     { unreachable() }
func maxKernel(x *float32, n int) float32                                       { unreachable(); return 0 }

func widenBF16AVX512(dst *float32, src *uint16, n int) { unreachable() }
func roundBF16AVX512(dst *uint16, src *float32, n int) { unreachable() }

func unreachable() { panic("vec: assembly kernel called in a build without assembly") }

func adamwKernel(p, g, m, v *float32, n int, c *AdamWStep) { unreachable() }

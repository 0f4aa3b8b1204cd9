// Include FIRST (before any other header) in files whose loops call vec_math.h.
// GCC keeps -ftrapping-math on by default, and with it will not turn `cond ? a : b` on floats into a
// vector blend (evaluating both sides might raise a floating-point exception the branch would not),
// so a loop over vec::exp stays scalar. Nothing in kiln reads floating-point exception flags, and
// results are unchanged, so these files give that guarantee up. Clang's default is already this.
// First, so that every function in the file (std:: inline ones too) has the same options and inlines.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

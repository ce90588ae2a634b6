#include "lowering/resample.h"

#include <algorithm>
#include <cmath>

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Value;

// x's dims with `dim` moved to the front, and the inverse permutation.
std::pair<ir::Dims, ir::Dims> front_perm(int64_t rank, int64_t dim) {
  ir::Dims perm{dim}, inv(rank);
  for (int64_t i = 0; i < rank; ++i)
    if (i != dim) perm.push_back(i);
  for (int64_t i = 0; i < rank; ++i) inv[perm[i]] = i;
  return {perm, inv};
}

Value index_table(ir::Graph& g, const Taps& t) {
  return ir::constant_tensor(g, DType::S64, {t.out, t.count}, std::vector<double>(t.index.begin(), t.index.end()));
}

}  // namespace

Value apply_taps(ir::Graph& g, Value x, int64_t dim, const Taps& taps) {
  ir::Type t = g.type(x);
  auto [perm, inv] = front_perm(t.rank(), dim);
  Value xt = dim == 0 ? x : ir::transpose(g, x, perm);
  Value gathered = ir::gather_rows(g, xt, index_table(g, taps));  // [out, count, rest...]
  ir::Shape gs = g.type(gathered).shape;
  ir::Shape rs = gs;
  rs.erase(rs.begin() + 1);
  Value r;
  if (taps.weight.empty()) {
    r = ir::reshape(g, gathered, rs);
  } else {
    Value w = ir::constant_tensor(g, t.dtype, {taps.out, taps.count}, taps.weight);
    Value prod = ir::binary(g, "stablehlo.multiply", gathered, ir::broadcast_in_dim(g, w, gs, {0, 1}));
    r = ir::reduce(g, prod, ir::constant(g, t.dtype, 0), {1}, ir::Combiner::Add);
  }
  return dim == 0 ? r : ir::transpose(g, r, inv);
}

Value apply_taps_backward(ir::Graph& g, Value gy, int64_t dim, const Taps& taps) {
  ir::Type t = g.type(gy);
  auto [perm, inv] = front_perm(t.rank(), dim);
  Value gt = dim == 0 ? gy : ir::transpose(g, gy, perm);  // [out, rest...]
  ir::Shape rest = g.type(gt).shape;
  ir::Shape us = rest;
  us.insert(us.begin() + 1, taps.count);
  ir::Dims map{0};
  for (int64_t i = 2; i < static_cast<int64_t>(us.size()); ++i) map.push_back(i);
  Value upd = ir::broadcast_in_dim(g, gt, us, map);
  if (!taps.weight.empty()) {
    Value w = ir::constant_tensor(g, t.dtype, {taps.out, taps.count}, taps.weight);
    upd = ir::binary(g, "stablehlo.multiply", upd, ir::broadcast_in_dim(g, w, us, {0, 1}));
  }
  ir::Shape zs = rest;
  zs[0] = taps.in;
  Value r = ir::scatter_rows(g, ir::full(g, t.dtype, 0, zs), index_table(g, taps), upd, ir::Combiner::Add);
  return dim == 0 ? r : ir::transpose(g, r, inv);
}

Taps pad_taps(PadMode mode, int64_t in, int64_t before, int64_t after) {
  Taps t;
  t.in = in;
  t.out = in + before + after;
  for (int64_t o = 0; o < t.out; ++o) {
    int64_t j = o - before;
    if (mode == PadMode::Reflect) {
      if (j < 0) j = -j;
      if (j >= in) j = 2 * (in - 1) - j;
    } else {
      j = std::clamp<int64_t>(j, 0, in - 1);
    }
    t.index.push_back(j);
  }
  return t;
}

// ------------------------------------------------------------ interpolation

namespace {

// ATen's helpers (UpSample.h), in the op's math type T.
template <typename T>
T scales_value(std::optional<double> scale, int64_t in, int64_t out) {
  return scale && *scale > 0 ? static_cast<T>(1.0 / *scale) : static_cast<T>(in) / static_cast<T>(out);
}
template <typename T>
T pixel_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : static_cast<T>(0);
  return scales_value<T>(scale, in, out);
}
template <typename T>
T source_index(T scale, int64_t dst, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<T>(dst);
  T src = scale * (static_cast<T>(dst) + static_cast<T>(0.5)) - static_cast<T>(0.5);
  return (!cubic && src < 0) ? static_cast<T>(0) : src;
}
template <typename T>
T cubic1(T x, T a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
template <typename T>
T cubic2(T x, T a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

template <typename T>
T aa_linear(T x) {
  x = std::abs(x);
  return x < 1 ? 1 - x : 0;
}
template <typename T>
T aa_cubic(T x) {
  const T a = -0.5;  // Pillow's antialiasing filter
  x = std::abs(x);
  if (x < 1) return cubic1(x, a);
  if (x < 2) return cubic2(x, a);
  return 0;
}

template <typename T>
Taps interp_taps_t(Interp mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Taps t;
  t.in = in;
  t.out = out;
  auto push = [&](int64_t i, double w) {
    t.index.push_back(std::clamp<int64_t>(i, 0, in - 1));
    t.weight.push_back(w);
  };
  switch (mode) {
    case Interp::Nearest:
    case Interp::NearestExact: {
      float s = scales_value<float>(scale, in, out);  // float whatever the dtype, as ATen
      for (int64_t o = 0; o < out; ++o) {
        int64_t i;
        if (mode == Interp::Nearest) {
          i = out == in ? o : out == 2 * in ? (o >> 1) : static_cast<int64_t>(std::floor(static_cast<float>(o) * s));
        } else {
          i = static_cast<int64_t>(std::floor(static_cast<float>((o + 0.5) * static_cast<double>(s))));
        }
        t.index.push_back(std::min(i, in - 1));
      }
      return t;
    }
    case Interp::Linear: {
      t.count = 2;
      T s = pixel_scale<T>(in, out, align_corners, scale);
      for (int64_t o = 0; o < out; ++o) {
        T real = source_index<T>(s, o, align_corners, false);
        int64_t i = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
        T lambda = std::min(std::max(real - static_cast<T>(i), static_cast<T>(0)), static_cast<T>(1));
        push(i, static_cast<T>(1) - lambda);
        push(i < in - 1 ? i + 1 : i, lambda);
      }
      return t;
    }
    case Interp::Cubic: {
      t.count = 4;
      T s = pixel_scale<T>(in, out, align_corners, scale);
      const T a = -0.75;
      for (int64_t o = 0; o < out; ++o) {
        T real = source_index<T>(s, o, align_corners, true);
        int64_t i = static_cast<int64_t>(std::floor(real));
        T x = real - static_cast<T>(i);
        T x2 = 1 - x;
        T c[4] = {cubic2<T>(x + 1, a), cubic1<T>(x, a), cubic1<T>(x2, a), cubic2<T>(x2 + 1, a)};
        for (int k = 0; k < 4; ++k) push(i - 1 + k, c[k]);
      }
      return t;
    }
    case Interp::LinearAA:
    case Interp::CubicAA: {
      int interp = mode == Interp::LinearAA ? 2 : 4;
      T s = pixel_scale<T>(in, out, align_corners, scale);
      T support = s >= 1 ? static_cast<T>(interp * 0.5) * s : static_cast<T>(interp * 0.5);
      int64_t max_size = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
      t.count = max_size;
      T invscale = s >= 1 ? static_cast<T>(1.0 / s) : static_cast<T>(1);
      std::vector<T> w(max_size);
      for (int64_t o = 0; o < out; ++o) {
        T center = static_cast<T>(static_cast<double>(s) * (o + 0.5));
        int64_t xmin = std::max(static_cast<int64_t>(static_cast<double>(center - support) + 0.5), int64_t{0});
        int64_t xsize = std::min(static_cast<int64_t>(static_cast<double>(center + support) + 0.5), in) - xmin;
        xsize = std::clamp(xsize, int64_t{0}, max_size);
        T total = 0;
        for (int64_t j = 0; j < xsize; ++j) {
          T arg = static_cast<T>((static_cast<double>(static_cast<T>(j + xmin) - center) + 0.5) *
                                 static_cast<double>(invscale));
          w[j] = mode == Interp::LinearAA ? aa_linear<T>(arg) : aa_cubic<T>(arg);
          total += w[j];
        }
        for (int64_t j = 0; j < max_size; ++j) {
          T v = j < xsize ? (total != 0 ? w[j] / total : w[j]) : static_cast<T>(0);
          push(j < xsize ? xmin + j : xmin, v);
        }
      }
      return t;
    }
  }
  return t;
}

}  // namespace

Taps interp_taps(Interp mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale,
                 bool double_precision) {
  return double_precision ? interp_taps_t<double>(mode, in, out, align_corners, scale)
                          : interp_taps_t<float>(mode, in, out, align_corners, scale);
}

// ------------------------------------------------------------ im2col / col2im

namespace {

int64_t blocks(int64_t in, int64_t k, int64_t d, int64_t p, int64_t s) { return (in + 2 * p - (d * (k - 1) + 1)) / s + 1; }

}  // namespace

Value im2col(ir::Graph& g, Value x, const Im2ColParams& p) {
  ir::Type t = g.type(x);  // [N, C, H, W]
  int64_t n = t.shape[0], c = t.shape[1];
  int64_t oh = blocks(t.shape[2], p.kernel[0], p.dilation[0], p.padding[0], p.stride[0]);
  int64_t ow = blocks(t.shape[3], p.kernel[1], p.dilation[1], p.padding[1], p.stride[1]);
  Value xp = ir::pad(g, x, ir::constant(g, t.dtype, 0), {0, 0, p.padding[0], p.padding[1]},
                     {0, 0, p.padding[0], p.padding[1]});
  std::vector<Value> pieces;
  for (int64_t i = 0; i < p.kernel[0]; ++i)
    for (int64_t j = 0; j < p.kernel[1]; ++j) {
      int64_t h0 = i * p.dilation[0], w0 = j * p.dilation[1];
      Value s = ir::slice(g, xp, {0, 0, h0, w0}, {n, c, h0 + (oh - 1) * p.stride[0] + 1, w0 + (ow - 1) * p.stride[1] + 1},
                          {1, 1, p.stride[0], p.stride[1]});
      pieces.push_back(ir::reshape(g, s, {n, c, 1, oh * ow}));
    }
  Value cols = pieces.size() == 1 ? pieces[0] : ir::concatenate(g, pieces, 2);
  return ir::reshape(g, cols, {n, c * p.kernel[0] * p.kernel[1], oh * ow});
}

Value col2im(ir::Graph& g, Value cols, const ir::Dims& output_size, const Im2ColParams& p) {
  ir::Type t = g.type(cols);  // [N, C*kk, L]
  int64_t kk = p.kernel[0] * p.kernel[1];
  int64_t n = t.shape[0], c = t.shape[1] / kk;
  int64_t oh = blocks(output_size[0], p.kernel[0], p.dilation[0], p.padding[0], p.stride[0]);
  int64_t ow = blocks(output_size[1], p.kernel[1], p.dilation[1], p.padding[1], p.stride[1]);
  int64_t hp = output_size[0] + 2 * p.padding[0], wp = output_size[1] + 2 * p.padding[1];
  Value blocks5 = ir::reshape(g, cols, {n, c, kk, oh, ow});
  Value zero = ir::constant(g, t.dtype, 0);
  Value sum;
  for (int64_t i = 0; i < p.kernel[0]; ++i)
    for (int64_t j = 0; j < p.kernel[1]; ++j) {
      int64_t k = i * p.kernel[1] + j;
      Value piece = ir::reshape(g, ir::slice(g, blocks5, {0, 0, k, 0, 0}, {n, c, k + 1, oh, ow}), {n, c, oh, ow});
      int64_t h0 = i * p.dilation[0], w0 = j * p.dilation[1];
      // Spread the block over the padded image: stride - 1 zeros between elements.
      Value placed = ir::pad_interior(g, piece, zero, {0, 0, h0, w0},
                                      {0, 0, hp - (h0 + (oh - 1) * p.stride[0] + 1), wp - (w0 + (ow - 1) * p.stride[1] + 1)},
                                      {0, 0, p.stride[0] - 1, p.stride[1] - 1});
      sum = sum.valid() ? ir::binary(g, "stablehlo.add", sum, placed) : placed;
    }
  return ir::slice(g, sum, {0, 0, p.padding[0], p.padding[1]},
                   {n, c, p.padding[0] + output_size[0], p.padding[1] + output_size[1]});
}

}  // namespace tpu::lowering

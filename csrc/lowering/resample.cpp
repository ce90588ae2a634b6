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
    Value prod = ir::binary(g, ir::Op::Multiply, gathered, ir::broadcast_in_dim(g, w, gs, {0, 1}));
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
    upd = ir::binary(g, ir::Op::Multiply, upd, ir::broadcast_in_dim(g, w, us, {0, 1}));
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
      sum = sum.valid() ? ir::binary(g, ir::Op::Add, sum, placed) : placed;
    }
  return ir::slice(g, sum, {0, 0, p.padding[0], p.padding[1]},
                   {n, c, p.padding[0] + output_size[0], p.padding[1] + output_size[1]});
}

}  // namespace tpu::lowering

// ------------------------------------------------------------ grid sampling

namespace tpu::lowering {
namespace {

using ir::DType;
using ir::Value;

// Elementwise helpers over one shape and dtype.
struct Ew {
  ir::Graph& g;
  ir::Shape shape;
  DType dt;
  Value c(double v) const { return ir::full(g, dt, v, shape); }
  Value add(Value a, Value b) const { return ir::binary(g, ir::Op::Add, a, b); }
  Value sub(Value a, Value b) const { return ir::binary(g, ir::Op::Subtract, a, b); }
  Value mul(Value a, Value b) const { return ir::binary(g, ir::Op::Multiply, a, b); }
  Value div(Value a, Value b) const { return ir::binary(g, ir::Op::Divide, a, b); }
  Value floor(Value a) const { return ir::unary(g, ir::Op::Floor, a); }
  Value lt(Value a, Value b) const { return ir::compare(g, a, b, ir::Compare::LT); }
  Value le(Value a, Value b) const { return ir::compare(g, a, b, ir::Compare::LE); }
  Value ge(Value a, Value b) const { return ir::compare(g, a, b, ir::Compare::GE); }
  Value sel(Value p, Value a, Value b) const { return ir::select(g, p, a, b); }
  Value land(Value a, Value b) const { return ir::binary(g, ir::Op::And, a, b); }
};

// A coordinate and d(coordinate)/d(grid value).
struct Coord {
  Value v, d;
};

// ATen's grid_sampler_unnormalize(_set_grad).
Coord unnormalize(const Ew& e, Value c, int64_t size, bool align) {
  if (align) return {e.mul(e.div(e.add(c, e.c(1)), e.c(2)), e.c(static_cast<double>(size - 1))),
                     e.c((size - 1) / 2.0)};
  return {e.div(e.sub(e.mul(e.add(c, e.c(1)), e.c(static_cast<double>(size))), e.c(1)), e.c(2)), e.c(size / 2.0)};
}

// clip_coordinates(_set_grad): into [0, size - 1]; the gradient is 0 unless strictly inside.
Coord clip(const Ew& e, Coord x, int64_t size) {
  Value lo = e.c(0), hi = e.c(static_cast<double>(size - 1));
  Value inside = e.land(e.lt(lo, x.v), e.lt(x.v, hi));
  Value v = e.sel(e.le(x.v, lo), lo, e.sel(e.ge(x.v, hi), hi, x.v));
  return {v, e.sel(inside, x.d, e.c(0))};
}

// reflect_coordinates(_set_grad) over [twice_low / 2, twice_high / 2].
Coord reflect(const Ew& e, Coord x, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return {e.c(0), e.c(0)};
  double lo = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
  Value in = e.sub(x.v, e.c(lo));
  Value neg = e.lt(in, e.c(0));
  Value sign = e.sel(neg, e.c(-1), e.c(1));
  in = e.sel(neg, ir::unary(e.g, ir::Op::Negate, in), in);
  Value extra = ir::binary(e.g, ir::Op::Remainder, in, e.c(span));
  Value flips = e.floor(e.div(in, e.c(span)));
  Value even = ir::compare(e.g, ir::binary(e.g, ir::Op::Remainder, flips, e.c(2)), e.c(0), ir::Compare::EQ);
  Value v = e.sel(even, e.add(extra, e.c(lo)), e.add(e.sub(e.c(span), extra), e.c(lo)));
  Value d = e.mul(x.d, e.sel(even, sign, ir::unary(e.g, ir::Op::Negate, sign)));
  return {v, d};
}

// compute_coordinates(_set_grad): the padding mode's map of a source coordinate.
Coord pad_coordinate(const Ew& e, Coord x, int64_t size, int64_t padding, bool align) {
  if (padding == 1) return clip(e, x, size);
  if (padding == 2) {
    x = align ? reflect(e, x, 0, 2 * (size - 1)) : reflect(e, x, -1, 2 * size - 1);
    return clip(e, x, size);
  }
  return x;
}

// One sampling tap: integer positions per spatial dim (float-valued, D..W
// order) and the weight of the tap.
struct Tap {
  std::vector<Value> pos;
  Value weight;
  std::vector<Value> dweight;  // d(weight)/d(grid component) per spatial dim (bilinear and bicubic)
  Value wx, wy;                // bicubic: the separate x and y coefficients
};

struct Sampler {
  ir::Graph& g;
  int64_t n, c, k;
  ir::Shape spatial, out;  // input spatial sizes (D..W), output grid sizes
  ir::Shape grid_shape;    // [N, out...]
  Value rows;              // [N * prod(spatial), C] in acc
  DType acc;

  // Flat row index and in-bounds mask of a tap.
  std::pair<Value, Value> locate(const Ew& e, const Tap& t) const {
    Value flat = ir::iota(g, DType::S64, grid_shape, 0);
    int64_t plane = 1;
    for (int64_t s : spatial) plane *= s;
    flat = ir::binary(g, ir::Op::Multiply, flat, ir::full(g, DType::S64, static_cast<double>(plane), grid_shape));
    Value ok = ir::full(g, DType::Pred, 1, grid_shape);
    int64_t stride = 1;
    for (int64_t d = k - 1; d >= 0; --d) {
      Value inside = e.land(e.ge(t.pos[d], e.c(0)), e.lt(t.pos[d], e.c(static_cast<double>(spatial[d]))));
      ok = e.land(ok, inside);
      Value i = ir::convert(g, e.sel(inside, t.pos[d], e.c(0)), DType::S64);
      i = ir::binary(g, ir::Op::Multiply, i, ir::full(g, DType::S64, static_cast<double>(stride), grid_shape));
      flat = ir::binary(g, ir::Op::Add, flat, i);
      stride *= spatial[d];
    }
    return {flat, ok};
  }
  // Values of a tap [N, out..., C], 0 out of bounds.
  Value values(const Ew& e, const Tap& t) const {
    auto [flat, ok] = locate(e, t);
    Value v = ir::gather_rows(g, rows, flat);
    const ir::Shape& vs = g.type(v).shape;
    ir::Dims map;
    for (int64_t i = 0; i < static_cast<int64_t>(grid_shape.size()); ++i) map.push_back(i);
    return ir::select(g, ir::broadcast_in_dim(g, ok, vs, map), v, ir::full(g, acc, 0, vs));
  }
};

// The taps of a sample, with the chain factor of each grid component.
std::vector<Tap> sample_taps(const Ew& e, const std::vector<Value>& comps, const ir::Shape& spatial,
                             const GridSampleParams& p, std::vector<Value>* chain) {
  int64_t k = static_cast<int64_t>(spatial.size());
  std::vector<Coord> src(k);
  for (int64_t d = 0; d < k; ++d) {
    // Spatial dim d (D..W) reads grid component k - 1 - d (x is W).
    Coord u = unnormalize(e, comps[k - 1 - d], spatial[d], p.align_corners);
    src[d] = p.interpolation == 2 ? u : pad_coordinate(e, u, spatial[d], p.padding, p.align_corners);
    if (chain) (*chain)[d] = src[d].d;
  }
  std::vector<Tap> taps;
  if (p.interpolation == 1) {
    Tap t;
    for (int64_t d = 0; d < k; ++d) t.pos.push_back(ir::unary(e.g, ir::Op::RoundNearestEven, src[d].v));
    t.weight = e.c(1);
    taps.push_back(t);
    return taps;
  }
  if (p.interpolation == 0) {
    std::vector<Value> lo(k), frac(k);
    for (int64_t d = 0; d < k; ++d) {
      lo[d] = e.floor(src[d].v);
      frac[d] = e.sub(src[d].v, lo[d]);
    }
    // Corners in ATen's order: x fastest, then y, then z.
    for (int64_t mask = 0; mask < (int64_t{1} << k); ++mask) {
      Tap t;
      t.pos.resize(k);
      std::vector<Value> w(k), dw(k);
      for (int64_t d = 0; d < k; ++d) {
        bool hi = (mask >> (k - 1 - d)) & 1;
        t.pos[d] = hi ? e.add(lo[d], e.c(1)) : lo[d];
        // (x_se - x) for the low corner, (x - x_nw) for the high one.
        w[d] = hi ? frac[d] : e.sub(e.add(lo[d], e.c(1)), src[d].v);
        dw[d] = e.c(hi ? 1 : -1);
      }
      // Product in x, y, z order, as ATen multiplies.
      for (int64_t d = k - 1; d >= 0; --d) t.weight = t.weight.valid() ? e.mul(t.weight, w[d]) : w[d];
      t.dweight.resize(k);
      for (int64_t d = 0; d < k; ++d) {
        Value prod = dw[d];
        for (int64_t f = k - 1; f >= 0; --f)
          if (f != d) prod = e.mul(prod, w[f]);
        t.dweight[d] = prod;
      }
      taps.push_back(t);
    }
    return taps;
  }
  // Bicubic (2d): 4 x 4 taps around floor(src), each coordinate mapped by the padding mode.
  const double a = -0.75;
  auto coeffs = [&](Value t) {
    auto c1 = [&](Value x) {  // ((a + 2) x - (a + 3)) x x + 1
      return e.add(e.mul(e.mul(e.sub(e.mul(e.c(a + 2), x), e.c(a + 3)), x), x), e.c(1));
    };
    auto c2 = [&](Value x) {  // ((a x - 5a) x + 8a) x - 4a
      return e.sub(e.mul(e.add(e.mul(e.sub(e.mul(e.c(a), x), e.c(5 * a)), x), e.c(8 * a)), x), e.c(4 * a));
    };
    Value x2 = e.sub(e.c(1), t);
    return std::vector<Value>{c2(e.add(t, e.c(1))), c1(t), c1(x2), c2(e.add(x2, e.c(1)))};
  };
  auto dcoeffs = [&](Value t) {
    Value x0 = e.sub(e.c(-1), t), x1 = ir::unary(e.g, ir::Op::Negate, t), x2 = e.sub(e.c(1), t),
          x3 = e.sub(e.c(2), t);
    return std::vector<Value>{
        e.sub(e.mul(e.sub(e.mul(e.c(-3 * a), x0), e.c(10 * a)), x0), e.c(8 * a)),
        e.mul(e.sub(e.mul(e.c(-3 * (a + 2)), x1), e.c(2 * (a + 3))), x1),
        e.mul(e.sub(e.mul(e.c(3 * (a + 2)), x2), e.c(2 * (a + 3))), x2),
        e.add(e.mul(e.sub(e.mul(e.c(3 * a), x3), e.c(10 * a)), x3), e.c(8 * a))};
  };
  Value ly = e.floor(src[0].v), lx = e.floor(src[1].v);
  Value ty = e.sub(src[0].v, ly), tx = e.sub(src[1].v, lx);
  std::vector<Value> cy = coeffs(ty), cx = coeffs(tx), dcy = dcoeffs(ty), dcx = dcoeffs(tx);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      Tap t;
      Coord py{e.add(ly, e.c(i - 1)), e.c(0)}, px{e.add(lx, e.c(j - 1)), e.c(0)};
      // get_value_bounded: the padding mode maps the tap, then truncates to an index.
      py = pad_coordinate(e, py, spatial[0], p.padding, p.align_corners);
      px = pad_coordinate(e, px, spatial[1], p.padding, p.align_corners);
      auto trunc = [&](Value v) { return ir::convert(e.g, ir::convert(e.g, v, DType::S64), e.dt); };
      t.pos = {p.padding == 0 ? py.v : trunc(py.v), p.padding == 0 ? px.v : trunc(px.v)};
      t.weight = e.mul(cx[j], cy[i]);
      t.wx = cx[j];
      t.wy = cy[i];
      // ATen's coefficient gradients are taken along the tap distance (-t): negate.
      t.dweight = {ir::unary(e.g, ir::Op::Negate, e.mul(cx[j], dcy[i])),
                   ir::unary(e.g, ir::Op::Negate, e.mul(dcx[j], cy[i]))};
      taps.push_back(t);
    }
  return taps;
}

Sampler make_sampler(ir::Graph& g, Value input, DType acc) {
  ir::Shape is = g.type(input).shape;
  int64_t k = static_cast<int64_t>(is.size()) - 2;
  Sampler s{g, is[0], is[1], k, ir::Shape(is.begin() + 2, is.end()), {}, {}, {}, acc};
  ir::Dims perm{0};
  int64_t plane = 1;
  for (int64_t d = 0; d < k; ++d) {
    perm.push_back(2 + d);
    plane *= is[2 + d];
  }
  perm.push_back(1);
  s.rows = ir::reshape(g, ir::transpose(g, ir::convert(g, input, acc), perm), {s.n * plane, s.c});
  return s;
}

// Grid components [N, out...] each, in acc.
std::vector<Value> grid_components(ir::Graph& g, Value grid, DType acc) {
  ir::Shape gs = g.type(grid).shape;
  int64_t k = gs.back();
  ir::Shape cs(gs.begin(), gs.end() - 1);
  Value ga = ir::convert(g, grid, acc);
  std::vector<Value> comps;
  for (int64_t i = 0; i < k; ++i) {
    ir::Dims lo(gs.size(), 0), hi = gs;
    lo.back() = i;
    hi.back() = i + 1;
    comps.push_back(ir::reshape(g, ir::slice(g, ga, lo, hi), cs));
  }
  return comps;
}

// [N, out..., C] <-> [N, C, out...]
Value channels_first(ir::Graph& g, Value v) {
  int64_t r = g.type(v).rank();
  ir::Dims perm{0, r - 1};
  for (int64_t i = 1; i < r - 1; ++i) perm.push_back(i);
  return ir::transpose(g, v, perm);
}
Value channels_last(ir::Graph& g, Value v) {
  int64_t r = g.type(v).rank();
  ir::Dims perm{0};
  for (int64_t i = 2; i < r; ++i) perm.push_back(i);
  perm.push_back(1);
  return ir::transpose(g, v, perm);
}

}  // namespace

Value grid_sample(ir::Graph& g, Value input, Value grid, const GridSampleParams& p, DType acc) {
  Sampler s = make_sampler(g, input, acc);
  std::vector<Value> comps = grid_components(g, grid, acc);
  s.grid_shape = g.type(comps[0]).shape;
  Ew e{g, s.grid_shape, acc};
  std::vector<Tap> taps = sample_taps(e, comps, s.spatial, p, nullptr);
  Value out;
  ir::Dims map;
  for (int64_t q = 0; q < static_cast<int64_t>(s.grid_shape.size()); ++q) map.push_back(q);
  auto weighted = [&](Value v, Value w) {
    return ir::binary(g, ir::Op::Multiply, v, ir::broadcast_in_dim(g, w, g.type(v).shape, map));
  };
  auto plus = [&](Value a, Value b) { return a.valid() ? ir::binary(g, ir::Op::Add, a, b) : b; };
  if (p.interpolation == 2) {
    // As ATen: each of the 4 rows interpolated along x, then the rows along y.
    for (int i = 0; i < 4; ++i) {
      Value row;
      for (int j = 0; j < 4; ++j) row = plus(row, weighted(s.values(e, taps[i * 4 + j]), taps[i * 4 + j].wx));
      out = plus(out, weighted(row, taps[i * 4].wy));
    }
    return channels_first(g, out);
  }
  for (const Tap& t : taps) {
    Value v = s.values(e, t);
    Value term = ir::binary(g, ir::Op::Multiply, v, ir::broadcast_in_dim(g, t.weight, g.type(v).shape, map));
    out = out.valid() ? ir::binary(g, ir::Op::Add, out, term) : term;
  }
  return channels_first(g, out);
}

GridSampleGrads grid_sample_backward(ir::Graph& g, Value grad, Value input, Value grid, const GridSampleParams& p,
                                     bool input_grad, bool grid_grad, DType acc) {
  Sampler s = make_sampler(g, input, acc);
  std::vector<Value> comps = grid_components(g, grid, acc);
  s.grid_shape = g.type(comps[0]).shape;
  Ew e{g, s.grid_shape, acc};
  int64_t k = s.k;
  std::vector<Value> chain(k);
  std::vector<Tap> taps = sample_taps(e, comps, s.spatial, p, &chain);
  Value gy = channels_last(g, ir::convert(g, grad, acc));  // [N, out..., C]
  const ir::Shape vs = g.type(gy).shape;
  ir::Dims map;
  for (int64_t q = 0; q < static_cast<int64_t>(s.grid_shape.size()); ++q) map.push_back(q);
  GridSampleGrads r;
  if (input_grad) {
    Value acc_rows = ir::full(g, acc, 0, g.type(s.rows).shape);
    for (const Tap& t : taps) {
      auto [flat, ok] = s.locate(e, t);
      Value w = e.sel(ok, t.weight, e.c(0));
      Value upd = ir::binary(g, ir::Op::Multiply, gy, ir::broadcast_in_dim(g, w, vs, map));
      acc_rows = ir::scatter_rows(g, acc_rows, flat, upd, ir::Combiner::Add);
    }
    ir::Shape is = g.type(input).shape;
    ir::Shape cl{s.n};
    for (int64_t d : s.spatial) cl.push_back(d);
    cl.push_back(s.c);
    r.input = channels_first(g, ir::reshape(g, acc_rows, cl));
  }
  if (grid_grad) {
    std::vector<Value> gsum(k);
    if (p.interpolation != 1) {
      for (const Tap& t : taps) {
        // sum over channels of grad * value, per grid point
        Value gv = ir::reduce(g, ir::binary(g, ir::Op::Multiply, gy, s.values(e, t)), ir::constant(g, acc, 0),
                              {static_cast<int64_t>(vs.size()) - 1}, ir::Combiner::Add);
        for (int64_t d = 0; d < k; ++d) {
          Value term = e.mul(gv, t.dweight[d]);
          gsum[d] = gsum[d].valid() ? e.add(gsum[d], term) : term;
        }
      }
    }
    ir::Shape gs = s.grid_shape;
    gs.push_back(1);
    std::vector<Value> parts;
    for (int64_t i = 0; i < k; ++i) {  // grid component i is spatial dim k - 1 - i
      int64_t d = k - 1 - i;
      Value v = p.interpolation == 1 ? e.c(0) : e.mul(gsum[d], chain[d]);
      parts.push_back(ir::reshape(g, v, gs));
    }
    r.grid = ir::concatenate(g, parts, static_cast<int64_t>(gs.size()) - 1);
  }
  return r;
}

}  // namespace tpu::lowering

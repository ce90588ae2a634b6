// A short list of int64 (a shape, a dimension list): up to kInline entries live
// inside the object. Every IR node has a shape and lowering makes many small
// lists, so a heap allocation per list was a large share of an op's host cost.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace tpu::ir {

class Ints {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;
  static constexpr size_t kInline = 6;

  Ints() = default;
  Ints(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  explicit Ints(size_t count, int64_t value = 0) { resize(count, value); }
  template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>
  Ints(It first, It last) {
    assign(first, last);
  }
  Ints(const std::vector<int64_t>& values) { assign(values.begin(), values.end()); }  // NOLINT: implicit
  Ints(const Ints& other) { assign(other.begin(), other.end()); }
  Ints(Ints&& other) noexcept { steal(other); }
  Ints& operator=(const Ints& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  Ints& operator=(Ints&& other) noexcept {
    if (this != &other) {
      release();
      steal(other);
    }
    return *this;
  }
  Ints& operator=(std::initializer_list<int64_t> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  ~Ints() { release(); }

  template <class It>
  void assign(It first, It last) {
    size_t n = static_cast<size_t>(std::distance(first, last));
    size_ = 0;
    reserve(n);
    std::copy(first, last, data_);
    size_ = static_cast<uint32_t>(n);
  }
  void assign(size_t count, int64_t value) {
    size_ = 0;
    resize(count, value);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  int64_t* data() { return data_; }
  const int64_t* data() const { return data_; }
  iterator begin() { return data_; }
  iterator end() { return data_ + size_; }
  const_iterator begin() const { return data_; }
  const_iterator end() const { return data_ + size_; }
  const_iterator cbegin() const { return data_; }
  const_iterator cend() const { return data_ + size_; }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
  int64_t& operator[](size_t i) { return data_[i]; }
  const int64_t& operator[](size_t i) const { return data_[i]; }
  // Checked, as std::vector's: lowerings rely on it to turn a bad index into an exception.
  int64_t& at(size_t i) {
    check(i);
    return data_[i];
  }
  const int64_t& at(size_t i) const {
    check(i);
    return data_[i];
  }
  int64_t& front() { return data_[0]; }
  const int64_t& front() const { return data_[0]; }
  int64_t& back() { return data_[size_ - 1]; }
  const int64_t& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= capacity_) return;
    size_t grown = std::max(n, size_t(capacity_) * 2);
    auto* heap = new int64_t[grown];
    std::memcpy(heap, data_, size_ * sizeof(int64_t));
    release();
    data_ = heap;
    capacity_ = static_cast<uint32_t>(grown);
  }
  void push_back(int64_t v) {
    if (size_ == capacity_) reserve(size_ + 1);
    data_[size_++] = v;
  }
  int64_t& emplace_back(int64_t v) {
    push_back(v);
    return back();
  }
  void pop_back() { --size_; }
  void clear() { size_ = 0; }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data_[i] = value;
    size_ = static_cast<uint32_t>(n);
  }
  iterator insert(const_iterator pos, int64_t v) { return insert(pos, size_t(1), v); }
  iterator insert(const_iterator pos, size_t count, int64_t v) {
    size_t at = static_cast<size_t>(pos - data_);
    reserve(size_ + count);
    std::memmove(data_ + at + count, data_ + at, (size_ - at) * sizeof(int64_t));
    std::fill(data_ + at, data_ + at + count, v);
    size_ += static_cast<uint32_t>(count);
    return data_ + at;
  }
  template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>
  iterator insert(const_iterator pos, It first, It last) {
    Ints values(first, last);  // the range may alias this list
    size_t at = static_cast<size_t>(pos - data_), count = values.size();
    reserve(size_ + count);
    std::memmove(data_ + at + count, data_ + at, (size_ - at) * sizeof(int64_t));
    std::copy(values.begin(), values.end(), data_ + at);
    size_ += static_cast<uint32_t>(count);
    return data_ + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> values) {
    return insert(pos, values.begin(), values.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    size_t at = static_cast<size_t>(first - data_), count = static_cast<size_t>(last - first);
    std::memmove(data_ + at, data_ + at + count, (size_ - at - count) * sizeof(int64_t));
    size_ -= static_cast<uint32_t>(count);
    return data_ + at;
  }

  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  friend bool operator==(const Ints& a, const Ints& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const Ints& a, const Ints& b) { return !(a == b); }
  friend bool operator<(const Ints& a, const Ints& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void check(size_t i) const {
    if (i >= size_) throw std::out_of_range("ir::Ints::at: index " + std::to_string(i) + " out of range for size " +
                                            std::to_string(size_));
  }
  bool on_heap() const { return data_ != inline_; }
  void release() {
    if (on_heap()) delete[] data_;
    data_ = inline_;
    capacity_ = kInline;
  }
  // Leaves `other` empty (inline).
  void steal(Ints& other) {
    if (other.on_heap()) {
      data_ = other.data_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_;
      other.capacity_ = kInline;
    } else {
      std::memcpy(inline_, other.inline_, other.size_ * sizeof(int64_t));
    }
    size_ = other.size_;
    other.size_ = 0;
  }

  int64_t* data_ = inline_;
  uint32_t size_ = 0, capacity_ = kInline;
  int64_t inline_[kInline] = {};
};

}  // namespace tpu::ir

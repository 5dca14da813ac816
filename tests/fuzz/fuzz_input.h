// Reads a libFuzzer input as a stream of choices: bytes, small integers, picks from
// a list. Past the end every read gives 0, so any input is a complete program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace strata::fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // 0 <= r < n (n > 0).
  size_t pick(size_t n) { return n <= 256 ? byte() % n : (static_cast<size_t>(byte()) << 8 | byte()) % n; }
  bool flag() { return byte() & 1; }
  int64_t int64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | byte();
    return static_cast<int64_t>(v);
  }
  double float64() {
    const uint64_t bits = static_cast<uint64_t>(int64());
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
  std::string rest() {
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    pos_ = size_;
    return s;
  }
  bool done() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace strata::fuzz

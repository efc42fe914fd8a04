#include "ps/table_memory.h"

#include <sys/mman.h>

#include <new>
#include <utility>

namespace pstrain {

TableMemory::TableMemory(size_t bytes, size_t stagger_lines) : bytes_(bytes) {
  if (bytes >= kHugePageThreshold) {
    const size_t stagger = stagger_lines * 64;
    void* p = ::mmap(nullptr, bytes + stagger, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (p != MAP_FAILED) {
      // A hint: where transparent huge pages are off, this does nothing and that is fine.
      (void)::madvise(p, bytes + stagger, MADV_HUGEPAGE);
      data_ = static_cast<char*>(p) + stagger;
      mapped_ = true;
      stagger_bytes_ = stagger;
      return;
    }
  }
  data_ = new (std::nothrow) char[bytes == 0 ? 1 : bytes]();
}

TableMemory::~TableMemory() { Release(); }

TableMemory::TableMemory(TableMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      mapped_(std::exchange(other.mapped_, false)),
      stagger_bytes_(std::exchange(other.stagger_bytes_, 0)) {}

TableMemory& TableMemory::operator=(TableMemory&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    mapped_ = std::exchange(other.mapped_, false);
    stagger_bytes_ = std::exchange(other.stagger_bytes_, 0);
  }
  return *this;
}

void TableMemory::Release() {
  if (data_ == nullptr) return;
  if (mapped_) {
    ::munmap(data_ - stagger_bytes_, bytes_ + stagger_bytes_);
  } else {
    delete[] data_;
  }
  data_ = nullptr;
}

}  // namespace pstrain

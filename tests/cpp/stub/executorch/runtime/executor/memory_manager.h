// A stand-in for ExecuTorch's executorch/runtime/executor/memory_manager.h
// (same constructor and getters, ExecuTorch 1.x); see
// ../core/memory_allocator.h.
#pragma once

#include <executorch/runtime/core/memory_allocator.h>

namespace executorch {
namespace runtime {

class HierarchicalAllocator;

class MemoryManager final {
 public:
  explicit MemoryManager(MemoryAllocator* method_allocator,
                         HierarchicalAllocator* planned_memory = nullptr,
                         MemoryAllocator* temp_allocator = nullptr)
      : method_allocator_(method_allocator),
        planned_memory_(planned_memory),
        temp_allocator_(temp_allocator) {}

  MemoryAllocator* method_allocator() const { return method_allocator_; }
  HierarchicalAllocator* planned_memory() const { return planned_memory_; }
  MemoryAllocator* temp_allocator() const { return temp_allocator_; }

 private:
  MemoryAllocator* method_allocator_;
  HierarchicalAllocator* planned_memory_;
  MemoryAllocator* temp_allocator_;
};

}  // namespace runtime
}  // namespace executorch

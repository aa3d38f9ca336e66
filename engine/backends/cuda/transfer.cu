/* transfer.cu — device memory handed to the engine (lightning states, KV pages), copies between it and
 * the host, and the checkpoint path that copies without stalling compute.
 *
 * Allocation: blocks are pooled by exact size (the engine asks for a few sizes only: a lightning
 * state, a KV page), because cudaFree synchronises the whole device. A pooled block is handed out
 * again zeroed by a memset on the compute stream, which orders it after every earlier use of the
 * block: all work runs on that one stream.
 *
 * Checkpoint copies (to_host_async): the source is first snapshotted device-to-device on the compute
 * stream (fast, and it frees the source for the next chunk at once), the copy stream waits for that
 * snapshot, moves it to pinned host memory and hands it to the caller's buffer from a host callback.
 * wait_host drains the copy stream. Staging is a bump allocator reset at each drain; a request that
 * does not fit drains first and grows the staging.
 *
 * Small uploads (token ids, segment tables, page tables) go through a pinned ring mirrored on the
 * device. It is rewound only at the start of an operation and after a stream synchronisation, so no
 * pending copy or kernel can still be reading what is overwritten; if one operation's uploads do
 * not fit, a larger ring replaces it and the old one is freed at the next rewind.
 */
#include <string.h>

#include <algorithm>

#include "engine/backends/cuda/backend_internal.h"

lh_status lh_cu_fail(lh_error *err, const char *call, cudaError_t e, const char *file, int line) {
  const char *base = strrchr(file, '/');
  return lh_error_set(err, e == cudaErrorMemoryAllocation ? LH_ENOMEM : LH_EBACKEND, "cuda: %s failed: %s: %s (%s:%d)",
                      call, cudaGetErrorName(e), cudaGetErrorString(e), base ? base + 1 : file, line);
}

lh_status lh_cu_blas_fail(lh_error *err, const char *call, cublasStatus_t s, const char *file, int line) {
  const char *base = strrchr(file, '/');
  return lh_error_set(err, s == CUBLAS_STATUS_ALLOC_FAILED ? LH_ENOMEM : LH_EBACKEND,
                      "cublas: %s failed: %s: %s (%s:%d)", call, cublasGetStatusName(s), cublasGetStatusString(s),
                      base ? base + 1 : file, line);
}

/* ---- the KV arena ------------------------------------------------------------------------------ */

/* The driver's virtual-memory calls, looked up through the runtime at first use rather than
 * linked: binaries must start on machines with the toolkit but no driver (CI, the build box). */
static struct {
  int tried, ok;
  decltype(&cuMemGetAllocationGranularity) granularity;
  decltype(&cuMemAddressReserve) reserve;
  decltype(&cuMemAddressFree) address_free;
  decltype(&cuMemCreate) create;
  decltype(&cuMemRelease) release;
  decltype(&cuMemMap) map;
  decltype(&cuMemUnmap) unmap;
  decltype(&cuMemSetAccess) set_access;
} drv;

template <typename F> static bool entry(const char *name, F *fn) {
  void *p = NULL;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !p) {
    (void)cudaGetLastError();
    return false;
  }
  *fn = (F)p;
  return true;
}

static bool driver_vmm(void) {
  if (!drv.tried) {
    drv.tried = 1;
    drv.ok = entry("cuMemGetAllocationGranularity", &drv.granularity) && entry("cuMemAddressReserve", &drv.reserve) &&
             entry("cuMemAddressFree", &drv.address_free) && entry("cuMemCreate", &drv.create) &&
             entry("cuMemRelease", &drv.release) && entry("cuMemMap", &drv.map) && entry("cuMemUnmap", &drv.unmap) &&
             entry("cuMemSetAccess", &drv.set_access);
  }
  return drv.ok;
}

void lh_cu_kv_arena_open(lh_cuda_backend *b) {
  b->kv_base = 0;
  if (!b->kv_page_bytes || !driver_vmm()) return;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = b->device;
  size_t gran = 0, free_b = 0, total_b = 0;
  if (drv.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || !gran) return;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return;
  /* Map 256 pages (at least 64 MiB) at a time; reserve the whole device's size of address space. */
  size_t chunk = std::max((size_t)64 << 20, 256 * b->kv_page_bytes);
  b->kv_chunk = (chunk + gran - 1) / gran * gran;
  b->kv_reserved = (total_b + b->kv_chunk - 1) / b->kv_chunk * b->kv_chunk;
  if (drv.reserve(&b->kv_base, b->kv_reserved, 0, 0, 0) != CUDA_SUCCESS) b->kv_base = 0, b->kv_reserved = 0;
  b->kv_mapped = 0;
  b->kv_next = 0;
}

/* One more page from the arena (mapping another chunk when needed); NULL when out of memory. */
static void *kv_arena_page(lh_cuda_backend *b) {
  const size_t end = (size_t)(b->kv_next + 1) * b->kv_page_bytes;
  while (end > b->kv_mapped) {
    if (b->kv_mapped + b->kv_chunk > b->kv_reserved) return NULL;
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = b->device;
    CUmemGenericAllocationHandle h;
    if (drv.create(&h, b->kv_chunk, &prop, 0) != CUDA_SUCCESS) return NULL;
    CUdeviceptr at = b->kv_base + b->kv_mapped;
    CUmemAccessDesc acc = {};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (drv.map(at, b->kv_chunk, 0, h, 0) != CUDA_SUCCESS) {
      drv.release(h);
      return NULL;
    }
    if (drv.set_access(at, b->kv_chunk, &acc, 1) != CUDA_SUCCESS) {
      drv.unmap(at, b->kv_chunk);
      drv.release(h);
      return NULL;
    }
    b->kv_handles.push_back(h);
    b->kv_mapped += b->kv_chunk;
  }
  return (void *)(uintptr_t)(b->kv_base + (size_t)b->kv_next++ * b->kv_page_bytes);
}

int64_t lh_cu_kv_block(const lh_cuda_backend *b, const void *page) {
  const CUdeviceptr p = (CUdeviceptr)(uintptr_t)page;
  if (!b->kv_base || p < b->kv_base || p >= b->kv_base + b->kv_mapped) return -1;
  const size_t off = (size_t)(p - b->kv_base);
  return off % b->kv_page_bytes ? -1 : (int64_t)(off / b->kv_page_bytes);
}

static bool in_arena(const lh_cuda_backend *b, const void *p) {
  const CUdeviceptr d = (CUdeviceptr)(uintptr_t)p;
  return b->kv_base && d >= b->kv_base && d < b->kv_base + b->kv_reserved;
}

static void kv_arena_close(lh_cuda_backend *b) {
  if (!b->kv_base) return;
  cudaDeviceSynchronize();
  for (size_t i = 0; i < b->kv_handles.size(); i++) {
    drv.unmap(b->kv_base + i * b->kv_chunk, b->kv_chunk);
    drv.release(b->kv_handles[i]);
  }
  b->kv_handles.clear();
  drv.address_free(b->kv_base, b->kv_reserved);
  b->kv_base = 0;
  b->kv_mapped = b->kv_reserved = 0;
}

/* ---- engine memory ------------------------------------------------------------------------------ */

void *lh_cu_alloc(lh_backend *be, size_t bytes) {
  lh_cuda_backend *b = cu_be(be);
  if (bytes == 0) bytes = 1;
  void *p = NULL;
  auto it = b->pool.find(bytes);
  if (it != b->pool.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    b->pooled_bytes -= bytes;
  } else if (b->kv_base && bytes == b->kv_page_bytes) {
    /* The pool of this size holds arena pages only, so reuse above keeps every page in the arena. */
    if (!(p = kv_arena_page(b))) return NULL;
  } else if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the sticky-free allocation error */
    return NULL;
  }
  if (cudaMemsetAsync(p, 0, bytes, b->stream) != cudaSuccess) {
    (void)cudaGetLastError();
    b->pool[bytes].push_back(p);
    b->pooled_bytes += bytes;
    return NULL;
  }
  b->live[p] = bytes;
  b->live_bytes += bytes;
  return p;
}

void lh_cu_free(lh_backend *be, void *p) {
  if (!p) return;
  lh_cuda_backend *b = cu_be(be);
  auto it = b->live.find(p);
  if (it == b->live.end()) return; /* not ours: ignore rather than corrupt the pool */
  size_t bytes = it->second;
  b->live.erase(it);
  b->live_bytes -= bytes;
  b->pool[bytes].push_back(p);
  b->pooled_bytes += bytes;
}

void lh_cu_release_memory(lh_cuda_backend *b) {
  for (auto &r : b->retired) cudaFree(r.first), cudaFreeHost(r.second);
  b->retired.clear();
  for (auto &kv : b->live)
    if (!in_arena(b, kv.first)) cudaFree(kv.first);
  for (auto &kv : b->pool)
    for (void *p : kv.second)
      if (!in_arena(b, p)) cudaFree(p);
  b->live.clear();
  b->pool.clear();
  b->live_bytes = b->pooled_bytes = 0;
  kv_arena_close(b);
}

lh_status lh_cu_to_host(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  if (!bytes) return LH_OK;
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, b->stream));
  CU(cudaStreamSynchronize(b->stream));
  return LH_OK;
}

lh_status lh_cu_from_host(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  if (!bytes) return LH_OK;
  /* From pageable memory the call returns once src has been staged, so the caller may reuse it. */
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, b->stream));
  return LH_OK;
}

lh_status lh_cu_copy(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  if (!bytes) return LH_OK;
  CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->stream));
  return LH_OK;
}

static void CUDART_CB deliver(void *arg) {
  const cu_async *a = static_cast<const cu_async *>(arg);
  memcpy(a->dst, a->pinned, a->bytes);
}

lh_status lh_cu_wait_host(lh_backend *be, lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  CU(cudaStreamSynchronize(b->copy_stream));
  b->pending.clear();
  b->snap_off = 0;
  return LH_OK;
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

lh_status lh_cu_to_host_async(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  if (!bytes) return LH_OK;
  if (b->snap_off + bytes > b->snap_cap) {
    LH_TRY(lh_cu_wait_host(be, err));
    if (bytes > b->snap_cap) {
      size_t cap = align256(bytes > 2 * b->snap_cap ? bytes : 2 * b->snap_cap);
      if (cap < ((size_t)64 << 20)) cap = (size_t)64 << 20;
      /* The copy stream is idle; the compute stream may still hold snapshot copies into the old
       * buffer only if the copy stream has not consumed them, which wait_host ruled out. */
      CU(cudaStreamSynchronize(b->stream));
      cudaFree(b->snap_dev);
      cudaFreeHost(b->snap_host);
      b->snap_dev = b->snap_host = NULL;
      b->snap_cap = 0;
      CU(cudaMalloc(&b->snap_dev, cap));
      CU(cudaHostAlloc(&b->snap_host, cap, cudaHostAllocDefault));
      b->snap_cap = cap;
    }
  }
  unsigned char *sd = b->snap_dev + b->snap_off, *sh = b->snap_host + b->snap_off;
  b->snap_off += align256(bytes);
  CU(cudaMemcpyAsync(sd, src, bytes, cudaMemcpyDeviceToDevice, b->stream));
  CU(cudaEventRecord(b->snap_event, b->stream));
  CU(cudaStreamWaitEvent(b->copy_stream, b->snap_event, 0));
  CU(cudaMemcpyAsync(sh, sd, bytes, cudaMemcpyDeviceToHost, b->copy_stream));
  b->pending.push_back(cu_async{dst, sh, bytes});
  CU(cudaLaunchHostFunc(b->copy_stream, deliver, &b->pending.back()));
  return LH_OK;
}

lh_status lh_cu_begin_op(lh_cuda_backend *b, lh_error *err) {
  if (b->up_off <= b->up_cap / 2 && b->retired.empty()) return LH_OK;
  CU(cudaStreamSynchronize(b->stream)); /* nothing enqueued can still read the ring */
  for (auto &r : b->retired) cudaFree(r.first), cudaFreeHost(r.second);
  b->retired.clear();
  b->up_off = 0;
  return LH_OK;
}

lh_status lh_cu_reserve(lh_cuda_backend *b, size_t bytes, void **host, void **dev, lh_error *err) {
  size_t need = align256(bytes ? bytes : 1);
  if (b->up_off + need > b->up_cap) {
    /* Work enqueued later in this operation may still read the current ring, so it is retired
     * (freed at the next operation's start) rather than rewound. */
    size_t cap = 2 * b->up_cap > 2 * need ? 2 * b->up_cap : 2 * need;
    unsigned char *d = NULL, *h = NULL;
    CU(cudaMalloc(&d, cap));
    cudaError_t e = cudaHostAlloc(&h, cap, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      cudaFree(d);
      return lh_cu_fail(err, "cudaHostAlloc(upload ring)", e, __FILE__, __LINE__);
    }
    b->retired.push_back({b->up_dev, b->up_host});
    b->up_dev = d, b->up_host = h, b->up_cap = cap, b->up_off = 0;
  }
  *host = b->up_host + b->up_off;
  *dev = b->up_dev + b->up_off;
  b->up_off += need;
  return LH_OK;
}

lh_status lh_cu_commit(lh_cuda_backend *b, const void *host, void *dev, size_t bytes, lh_error *err) {
  if (bytes) CU(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, b->stream));
  return LH_OK;
}

lh_status lh_cu_upload(lh_cuda_backend *b, const void *src, size_t bytes, void **dev, lh_error *err) {
  void *h = NULL;
  LH_TRY(lh_cu_reserve(b, bytes, &h, dev, err));
  if (bytes) memcpy(h, src, bytes);
  return lh_cu_commit(b, h, *dev, bytes, err);
}

lh_status lh_cu_download(lh_cuda_backend *b, void *dst, const void *src, size_t bytes, lh_error *err) {
  if (!bytes) return LH_OK;
  if (bytes > b->rb_cap) {
    CU(cudaStreamSynchronize(b->stream));
    cudaFreeHost(b->rb_host);
    b->rb_host = NULL;
    b->rb_cap = 0;
    size_t cap = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
    CU(cudaHostAlloc(&b->rb_host, cap, cudaHostAllocDefault));
    b->rb_cap = cap;
  }
  CU(cudaMemcpyAsync(b->rb_host, src, bytes, cudaMemcpyDeviceToHost, b->stream));
  CU(cudaStreamSynchronize(b->stream));
  memcpy(dst, b->rb_host, bytes);
  return LH_OK;
}

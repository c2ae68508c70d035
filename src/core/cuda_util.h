/*
 * cuda_util.h -- checked CUDA calls for host code (C or CUDA).
 *
 * RAP_CUDA_TRY(call) returns RAP_ERR_CUDA from the enclosing function with
 * the statement, file, line and CUDA's own message when call fails. Only
 * meaningful where RAP_HAVE_CUDA is defined.
 */
#ifndef RAP_CUDA_UTIL_H
#define RAP_CUDA_UTIL_H

#include "core/core.h"

#ifdef RAP_HAVE_CUDA
#include <cuda_runtime_api.h>

#define RAP_CUDA_TRY(call)                                                       \
    do {                                                                         \
        cudaError_t rap_cu_e_ = (call);                                          \
        if (rap_cu_e_ != cudaSuccess)                                            \
            return rap_fail(rap_cu_e_ == cudaErrorMemoryAllocation ? RAP_ERR_NOMEM \
                                                                   : RAP_ERR_CUDA, \
                            "%s:%d: %s: %s", __FILE__, __LINE__, #call,          \
                            cudaGetErrorString(rap_cu_e_));                      \
    } while (0)

/* After a kernel launch: reports a launch failure the same way. */
#define RAP_CUDA_LAUNCHED() RAP_CUDA_TRY(cudaGetLastError())

/* rap_cuda_malloc / rap_cuda_free: core.h (every build). */
#endif /* RAP_HAVE_CUDA */

#endif /* RAP_CUDA_UTIL_H */

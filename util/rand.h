/* rand.h — splitmix64, the tree's one small generator, header-only.
 *
 * The generator is Vigna's reference splitmix64.c (Steele, Lea and Flood's SplitMix with
 * Stafford's "Mix13" output function): the state advances by the golden-ratio constant and each
 * output is lh_mix64 of the new state. Integer arithmetic only, so a seed gives the same sequence
 * on every platform; the sampler's seeded draws (engine/sample.c and the CUDA backend's twin)
 * depend on that. lh_mix64 alone is a bijective 64-bit hash, usable on a counter or a key; under
 * nvcc it is callable from device code too. Not for anything that needs to be unpredictable.
 */
#ifndef LH_UTIL_RAND_H
#define LH_UTIL_RAND_H

#include <stdint.h>

#ifdef __CUDACC__
#define LH_RAND_HD __host__ __device__
#else
#define LH_RAND_HD
#endif

/* splitmix64's output function: a bijection of 64-bit words whose every output bit depends on
 * every input bit. */
LH_RAND_HD static inline uint64_t lh_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The next output of splitmix64; advances *state. */
static inline uint64_t lh_splitmix64(uint64_t *state) { return lh_mix64(*state += 0x9e3779b97f4a7c15ull); }

/* The next output's top 53 bits as a double in [0, 1) (every value a multiple of 2^-53); advances
 * *state by one output. */
static inline double lh_splitmix64_uniform(uint64_t *state) {
  return (double)(lh_splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

#endif

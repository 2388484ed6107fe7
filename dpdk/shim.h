/*
 * ferroce C shim: out-of-line wrappers for DPDK's static-inline functions and
 * macros, so that Rust can call them. Every function here is a thin call into
 * DPDK with no logic of its own; the safe layer lives in src/dpdk/.
 */
#ifndef FERROCE_SHIM_H
#define FERROCE_SHIM_H

#include <stdint.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

/* rte_errno is a per-lcore macro. */
int ferroce_errno(void);

/* ethdev fast path */
uint16_t ferroce_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t ferroce_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);

/* mbuf allocation and release */
struct rte_mbuf *ferroce_pktmbuf_alloc(struct rte_mempool *mp);
int ferroce_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n);
void ferroce_pktmbuf_free(struct rte_mbuf *m);

/* mbuf data access */
char *ferroce_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *ferroce_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *ferroce_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int ferroce_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
void *ferroce_pktmbuf_mtod(struct rte_mbuf *m);
uint16_t ferroce_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t ferroce_pktmbuf_pkt_len(const struct rte_mbuf *m);
uint16_t ferroce_pktmbuf_nb_segs(const struct rte_mbuf *m);
struct rte_mbuf *ferroce_pktmbuf_next(const struct rte_mbuf *m);
/* The first `max` segments of a chain: each one's data address and length;
 * returns the chain's number of segments (which may exceed `max`). */
uint16_t ferroce_pktmbuf_segs(const struct rte_mbuf *m, const void **addr, uint16_t *len, uint16_t max);
/* Prefetches what handling the `n` received frames `m` reads (mbufs,
 * headers, segments chained behind). */
void ferroce_prefetch_burst(struct rte_mbuf *const *m, uint16_t n);
uint16_t ferroce_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t ferroce_pktmbuf_tailroom(const struct rte_mbuf *m);
void ferroce_pktmbuf_reset(struct rte_mbuf *m);

/* Zero-copy send in one call: `frame` (one segment: `head` bytes of
 * headers, then its pad and ICRC) becomes three, its headers, an mbuf of
 * `segs` attached to the `len` bytes at `addr` (shared info of refcount 1
 * in its own data room, `free_cb` called when it is freed) and one of
 * `segs` holding the pad and ICRC. 0, or -1 with `frame` unchanged and
 * nothing attached. */
int ferroce_lend(struct rte_mempool *segs, struct rte_mbuf *frame, uint16_t head,
                 void *addr, uint16_t len,
                 rte_mbuf_extbuf_free_callback_t free_cb, void *fcb_opaque);
uint64_t ferroce_mem_virt2iova(const void *addr);

/* rings */
unsigned int ferroce_ring_dequeue_burst(struct rte_ring *r, void **objs, unsigned int n);

/* lcores */
unsigned int ferroce_lcore_id(void);

/* time */
uint64_t ferroce_tsc_cycles(void);
uint64_t ferroce_tsc_hz(void);
void ferroce_pause(void);

#endif

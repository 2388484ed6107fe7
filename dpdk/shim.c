/* See shim.h: each function forwards to one DPDK inline function or macro. */
#include "shim.h"

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_memory.h>
#include <rte_pause.h>

int ferroce_errno(void) { return rte_errno; }

uint16_t ferroce_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t ferroce_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_burst(port, queue, pkts, n);
}

struct rte_mbuf *ferroce_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }

int ferroce_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, n);
}

void ferroce_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }

char *ferroce_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }
char *ferroce_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_prepend(m, len); }
char *ferroce_pktmbuf_adj(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_adj(m, len); }
int ferroce_pktmbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }
void *ferroce_pktmbuf_mtod(struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }
uint16_t ferroce_pktmbuf_data_len(const struct rte_mbuf *m) { return rte_pktmbuf_data_len(m); }
uint32_t ferroce_pktmbuf_pkt_len(const struct rte_mbuf *m) { return rte_pktmbuf_pkt_len(m); }
uint16_t ferroce_pktmbuf_nb_segs(const struct rte_mbuf *m) { return m->nb_segs; }
struct rte_mbuf *ferroce_pktmbuf_next(const struct rte_mbuf *m) { return m->next; }
uint16_t ferroce_pktmbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }
uint16_t ferroce_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }
void ferroce_pktmbuf_reset(struct rte_mbuf *m) { rte_pktmbuf_reset(m); }

struct rte_mbuf_ext_shared_info *ferroce_pktmbuf_ext_shinfo_init(void *buf_addr, uint16_t *buf_len,
                                                                 rte_mbuf_extbuf_free_callback_t free_cb,
                                                                 void *fcb_opaque)
{
	return rte_pktmbuf_ext_shinfo_init_helper(buf_addr, buf_len, free_cb, fcb_opaque);
}

void ferroce_pktmbuf_attach_extbuf(struct rte_mbuf *m, void *buf_addr, uint64_t buf_iova,
                                   uint16_t buf_len, struct rte_mbuf_ext_shared_info *shinfo)
{
	rte_pktmbuf_attach_extbuf(m, buf_addr, buf_iova, buf_len, shinfo);
}

uint64_t ferroce_mem_virt2iova(const void *addr) { return rte_mem_virt2iova(addr); }

unsigned int ferroce_ring_dequeue_burst(struct rte_ring *r, void **objs, unsigned int n)
{
	return rte_ring_dequeue_burst(r, objs, n, NULL);
}

unsigned int ferroce_lcore_id(void) { return rte_lcore_id(); }

uint64_t ferroce_tsc_cycles(void) { return rte_get_tsc_cycles(); }
uint64_t ferroce_tsc_hz(void) { return rte_get_tsc_hz(); }
void ferroce_pause(void) { rte_pause(); }

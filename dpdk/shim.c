/* See shim.h: most functions forward to one DPDK inline function or macro;
 * a few do a hot path's several steps in one call (a received burst's
 * prefetch, zero-copy send's chaining). */
#include "shim.h"

#include <string.h>

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

uint16_t ferroce_pktmbuf_segs(const struct rte_mbuf *m, const void **addr, uint16_t *len, uint16_t max)
{
	uint16_t i = 0;
	for (const struct rte_mbuf *s = m; s != NULL && i < max; s = s->next, i++) {
		addr[i] = rte_pktmbuf_mtod(s, const void *);
		len[i] = s->data_len;
	}
	return m->nb_segs;
}

/* Starts loading what handling a received burst reads: each frame's mbuf
 * (both its lines: the second holds `next`) and its first data line; for a
 * frame in segments (a zero-copy frame: headers, payload, tail) the
 * payload's mbuf, the tail's mbuf and the tail's data. Each pass reads
 * only lines an earlier pass asked for, so the loads of the whole burst
 * overlap instead of following one another, frame by frame. */
void ferroce_prefetch_burst(struct rte_mbuf *const *m, uint16_t n)
{
	uint16_t i;
	for (i = 0; i < n; i++) {
		rte_prefetch0(m[i]);
		rte_prefetch0(&m[i]->next);
	}
	for (i = 0; i < n; i++) {
		const struct rte_mbuf *s = m[i];
		rte_prefetch0(rte_pktmbuf_mtod(s, const void *));
		if (s->next != NULL) {
			rte_prefetch0(s->next);
			rte_prefetch0(&s->next->next);
		}
	}
	for (i = 0; i < n; i++) {
		const struct rte_mbuf *s = m[i]->next;
		if (s != NULL && s->next != NULL) {
			rte_prefetch0(s->next);
			rte_prefetch0(&s->next->next);
		}
	}
	for (i = 0; i < n; i++) {
		const struct rte_mbuf *s = m[i]->next;
		if (s != NULL && s->next != NULL)
			rte_prefetch0(rte_pktmbuf_mtod(s->next, const void *));
	}
}

uint16_t ferroce_pktmbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }
uint16_t ferroce_pktmbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }
void ferroce_pktmbuf_reset(struct rte_mbuf *m) { rte_pktmbuf_reset(m); }

int ferroce_lend(struct rte_mempool *segs, struct rte_mbuf *frame, uint16_t head,
                 void *addr, uint16_t len,
                 rte_mbuf_extbuf_free_callback_t free_cb, void *fcb_opaque)
{
	struct rte_mbuf *seg[2];
	struct rte_mbuf_ext_shared_info *s;
	uint16_t written = frame->data_len, t;
	char *to;
	if (frame->nb_segs != 1 || head > written || len == 0)
		return -1;
	t = written - head;
	if (rte_pktmbuf_alloc_bulk(segs, seg, 2) != 0)
		return -1;
	/* Everything that can fail comes before the attach: once `seg[0]`
	 * points into the region, freeing it counts a frame done. */
	to = rte_pktmbuf_append(seg[1], t);
	if (to == NULL || rte_pktmbuf_tailroom(seg[0]) < sizeof(*s)) {
		rte_pktmbuf_free_bulk(seg, 2);
		return -1;
	}
	memcpy(to, rte_pktmbuf_mtod_offset(frame, char *, head), t);
	s = rte_pktmbuf_mtod(seg[0], struct rte_mbuf_ext_shared_info *);
	s->free_cb = free_cb;
	s->fcb_opaque = fcb_opaque;
	rte_mbuf_ext_refcnt_set(s, 1);
	rte_pktmbuf_attach_extbuf(seg[0], addr, (rte_iova_t)(uintptr_t)addr, len, s);
	seg[0]->data_len = len;
	seg[0]->pkt_len = len;
	/* The frame keeps its headers; the pad and ICRC moved to the tail. */
	frame->data_len = head;
	frame->next = seg[0];
	seg[0]->next = seg[1];
	frame->nb_segs = 3;
	frame->pkt_len = (uint32_t)head + len + t;
	return 0;
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

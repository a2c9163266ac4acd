"""What the v0 decode-block managers of reference/blocks.py (spec/ops.md §5.13) share, on working
copies of their arguments: flat views of the per-request lengths, the block table and the need /
free lists, the entry checks, giving decode blocks back, the need list and the allocation from
the free-list top. Each manager's own steps (preemption, recovery) stay in blocks.py.
"""

from ._arrays import _flat


class DecodeBlocks:
    """Flat views of the working copies ``w`` (a dict by argument name) that every v0 manager
    reads and writes; errors are ValueErrors naming ``op`` and the argument."""

    def __init__(self, op, w, block_size, k):
        self.op = op
        self.stop = _flat(w["stop_flags"])
        self.this_time = _flat(w["seq_lens_this_time"])
        self.dec = _flat(w["seq_lens_decoder"])
        self.tables = w["block_tables"]
        self.enc_blocks = _flat(w["encoder_block_lens"])
        self.need_list = _flat(w["need_block_list"])
        self.need_len = _flat(w["need_block_len"])
        self.used = _flat(w["used_list_len"])
        self.free_list = _flat(w["free_list"])
        self.free_len = _flat(w["free_list_len"])
        self.first = _flat(w["first_token_ids"])
        self.bsz, self.nb = self.this_time.size, self.tables.shape[1]
        self.block_size, self.k = block_size, k

    def fail(self, arg, msg):
        raise ValueError(f"{self.op}: {arg} {msg}")

    def slot(self, b):
        """The block-table slot request b's next tokens need."""
        return (int(self.dec[b]) + self.k + 1) // self.block_size

    # entry checks (the ops check all of these before writing anything)
    def check_free_len(self):
        if not 0 <= self.free_len[0] <= self.free_list.size:
            self.fail(
                "free_list_len",
                f"is {int(self.free_len[0])}; it must be in [0, {self.free_list.size}]",
            )

    def check_need_len(self):
        if self.need_len[0] != 0:
            self.fail("need_block_len", f"is {int(self.need_len[0])} on entry; it must be 0")

    def check_requests(self, running):
        """used_list_len fits each row; a running request (``running(b)``, this_time != 0) has
        seq_lens_decoder >= 0."""
        for b in range(self.bsz):
            used, enc_blocks = self.used[b], self.enc_blocks[b]
            if used < 0 or enc_blocks < 0 or enc_blocks + used > self.nb:
                self.fail(
                    "used_list_len",
                    f"(request {b}) is {int(used)}; with encoder_block_lens it must fit the "
                    f"block table row ({self.nb} slots)",
                )
            if running(b) and self.this_time[b] != 0 and self.dec[b] < 0:
                self.fail(
                    "seq_lens_decoder",
                    f"(request {b}) is {int(self.dec[b])} for a running request; it must be >= 0",
                )

    def return_decode_blocks(self, b):
        """Request b's decode blocks onto the free list; used_list_len is left as it is."""
        lo, n, top = int(self.enc_blocks[b]), int(self.used[b]), int(self.free_len[0])
        if top + n > self.free_list.size:
            self.fail(
                "free_list",
                f"is too small: returned blocks would fill {top + n} entries but it has "
                f"{self.free_list.size}",
            )
        self.free_list[top : top + n] = self.tables[b, lo : lo + n]
        self.tables[b, lo : lo + n] = -1
        self.free_len[0] = top + n

    def release(self, b):
        """Request b gives its decode blocks back and holds none afterwards."""
        self.return_decode_blocks(b)
        self.enc_blocks[b] = 0
        self.used[b] = 0

    def list_needs(self, finished):
        """Step 1: finished requests (``finished(b)``) get first_token_ids -1 and give their
        decode blocks back; running ones whose slot is empty join the need list (batch order).
        Returns the number of entries listed."""
        need = []
        for b in range(self.bsz):
            if finished(b):
                self.first[b] = -1
                if self.used[b] > 0:
                    self.release(b)
            elif (
                self.this_time[b] != 0
                and self.slot(b) < self.nb
                and self.tables[b, self.slot(b)] == -1
            ):
                need.append(b)
        if len(need) > self.need_list.size:
            self.fail(
                "need_block_list",
                f"is too small: {len(need)} requests need a block but it has "
                f"{self.need_list.size} entries",
            )
        self.need_list[: len(need)] = need
        self.need_len[0] = len(need)
        return len(need)

    def exhausted(self):
        self.fail(
            "free_list",
            f"is exhausted: {int(self.need_len[0])} requests need a decode block, "
            f"{int(self.free_len[0])} are free, and no running request holds a decode block to "
            "preempt (upstream loops forever)",
        )

    def unlist(self, victim, listed):
        """A preempted request leaves the need list."""
        for i in range(listed):
            if self.need_list[i] == victim:
                self.need_list[i] = -1
                self.need_len[0] -= 1
                break

    def allocate(self, listed):
        """Step 3: the running need-list entries pop the free-list top into their slot, in
        need-list order; the need list is cleared."""
        for i in range(listed):
            b = int(self.need_list[i])
            if b != -1 and not self.stop[b]:
                self.used[b] += 1
                self.free_len[0] -= 1
                self.tables[b, self.slot(b)] = self.free_list[self.free_len[0]]
            self.need_list[i] = -1

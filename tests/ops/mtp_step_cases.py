"""Hand cases of mtp_step_paddle (spec/ops.md §6.6), shared by test_mtp_step.py (op against the
reference) and test_reference_traces.py (the reference alone): block_size 4, K = 1, so request b's
next slot is (dec + 2) // 4. Each case is (id, inputs, expected): the fields given as lists;
per-request fields not given default (stop / drop False, seq_lens_this_time K + 1, the rest 0)."""

BLOCK_SIZE, K = 4, 1

CASES = [
    (
        # 0: target stopped, holds decode blocks 20 21; 1: next slot 2 empty (needs one);
        # 2: next slot 0 filled; 3: next slot 4 is past the row (NB = 4): no need.
        "frees_target_stopped_blocks_then_pops_one_for_each_request_short_of_a_slot",
        dict(
            base_model_stop_flags=[True, False, False, False],
            seq_lens_decoder=[0, 6, 1, 14],
            block_tables=[[5, 20, 21, -1], [6, 22, -1, -1], [7, -1, -1, -1], [8, 23, 24, 25]],
            encoder_block_lens=[1, 1, 1, 1],
            used_list_len=[2, 1, 0, 3],
            free_list=[30, 31, 0, 0, 0, 0],
            free_list_len=[2],
        ),
        dict(
            free_list=[30, 31, 20, 21, 0, 0],
            free_list_len=[3],
            block_tables=[[5, -1, -1, -1], [6, 22, 21, -1], [7, -1, -1, -1], [8, 23, 24, 25]],
            encoder_block_lens=[0, 1, 1, 1],
            used_list_len=[0, 2, 0, 3],
            stop_flags=[False] * 4,
            batch_drop=[False] * 4,
            seq_lens_this_time=[2] * 4,
            seq_lens_decoder=[0, 6, 1, 14],
        ),
    ),
    (
        # next slot (13 + 2) // 4 = 3 >= NB = 3: nothing needed, nothing preempted.
        "slot_beyond_the_block_table_row_means_no_need_even_with_an_empty_free_list",
        dict(
            seq_lens_decoder=[13],
            block_tables=[[5, 20, 21]],
            encoder_block_lens=[1],
            used_list_len=[2],
            free_list=[0],
            free_list_len=[0],
        ),
        dict(
            block_tables=[[5, 20, 21]],
            used_list_len=[2],
            free_list_len=[0],
            stop_flags=[False],
            batch_drop=[False],
        ),
    ),
    (
        "dropped_request_gives_back_its_blocks_and_keeps_stop_and_drop",
        dict(
            stop_flags=[True, False],
            batch_drop=[True, False],
            seq_lens_this_time=[0, 2],
            seq_lens_decoder=[0, 1],
            block_tables=[[3, 9, 8, -1], [4, -1, -1, -1]],
            encoder_block_lens=[1, 1],
            used_list_len=[2, 0],
            free_list=[0, 0, 0],
            free_list_len=[0],
        ),
        dict(
            free_list=[9, 8, 0],
            free_list_len=[2],
            block_tables=[[3, -1, -1, -1], [4, -1, -1, -1]],
            encoder_block_lens=[0, 1],
            used_list_len=[0, 0],
            stop_flags=[True, False],
            batch_drop=[True, False],
        ),
    ),
    (
        # Both running requests need a block and none is free: request 0 (2 blocks) is dropped; the
        # need list still counts it, so only request 1 gets a block (the last one freed: 21).
        "preempts_the_request_with_most_decode_blocks_and_skips_it_when_allocating",
        dict(
            base_model_stop_flags=[False, False, True],
            stop_flags=[False, False, True],
            seq_lens_this_time=[2, 2, 0],
            seq_lens_decoder=[10, 6, 0],
            block_tables=[[5, 20, 21, -1], [6, 22, -1, -1], [-1, -1, -1, -1]],
            encoder_block_lens=[1, 1, 0],
            used_list_len=[2, 1, 0],
            free_list=[0, 0, 0, 0],
            free_list_len=[0],
        ),
        dict(
            stop_flags=[True, False, True],
            batch_drop=[True, False, False],
            seq_lens_this_time=[0, 2, 0],
            seq_lens_decoder=[0, 6, 0],
            encoder_block_lens=[1, 1, 0],  # not reset on preemption
            used_list_len=[0, 2, 0],
            block_tables=[[5, -1, -1, -1], [6, 22, 21, -1], [-1, -1, -1, -1]],
            free_list=[20, 21, 0, 0],
            free_list_len=[1],
        ),
    ),
    (
        # Request 2 is target-stopped: its blocks 23 24 25 are appended after 40; requests 0 and 1
        # both need slot 2 and pop 25 then 24. Popped entries are not cleared (only free_list_len
        # moves).
        "blocks_freed_in_phase_1_are_popped_in_need_order_and_stay_in_the_array",
        dict(
            seq_lens_decoder=[6, 6, 6],
            block_tables=[[5, 20, -1, -1], [6, 22, -1, -1], [7, 23, 24, 25]],
            encoder_block_lens=[1, 1, 1],
            used_list_len=[1, 1, 3],
            base_model_stop_flags=[False, False, True],
            stop_flags=[False, False, True],
            free_list=[40, 0, 0, 0, 0, 0],
            free_list_len=[1],
        ),
        dict(
            free_list=[40, 23, 24, 25, 0, 0],
            free_list_len=[2],
            used_list_len=[2, 2, 0],
            block_tables=[[5, 20, 25, -1], [6, 22, 24, -1], [7, -1, -1, -1]],
            encoder_block_lens=[1, 1, 0],
            batch_drop=[False] * 3,
            stop_flags=[False, False, True],
        ),
    ),
    (
        "preemption_tie_goes_to_the_lowest_batch_index",
        dict(
            seq_lens_decoder=[6, 6],
            block_tables=[[5, 20, -1, -1], [6, 22, -1, -1]],
            encoder_block_lens=[1, 1],
            used_list_len=[1, 1],
            free_list=[40, 0, 0],
            free_list_len=[1],
        ),
        dict(
            stop_flags=[True, False],
            batch_drop=[True, False],
            seq_lens_this_time=[0, 2],
            seq_lens_decoder=[0, 6],
            block_tables=[[5, -1, -1, -1], [6, 22, 20, -1]],
            used_list_len=[0, 2],
            free_list=[40, 20, 0],
            free_list_len=[1],
        ),
    ),
    (
        # Two need a block, none is free, each holds one: dropping 0 frees one block but the need
        # count stays 2, so request 1 is dropped too and nothing is allocated (upstream behaviour).
        "need_list_keeps_dropped_requests_so_preemption_can_drop_everyone",
        dict(
            seq_lens_decoder=[6, 6],
            block_tables=[[5, 20, -1, -1], [6, 21, -1, -1]],
            encoder_block_lens=[1, 1],
            used_list_len=[1, 1],
            free_list=[0, 0],
            free_list_len=[0],
        ),
        dict(
            stop_flags=[True, True],
            batch_drop=[True, True],
            seq_lens_this_time=[0, 0],
            seq_lens_decoder=[0, 0],
            block_tables=[[5, -1, -1, -1], [6, -1, -1, -1]],
            encoder_block_lens=[1, 1],
            used_list_len=[0, 0],
            free_list=[20, 21],
            free_list_len=[2],
        ),
    ),
]

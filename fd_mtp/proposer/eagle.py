"""`EagleProposer`: an EAGLE / EAGLE-3 head (`fd_mtp.model.eagle.EagleHead`) drafting tokens.

The pipeline is the MTP proposer's (`fd_mtp.proposer.mtp.DraftModelProposer`: the same ops
``draft_model_preprocess`` -> ``eagle_get_hidden_states`` -> substeps of forward, logits,
``draft_model_update``, ``eagle_get_self_hidden_states`` -> ``draft_model_postprocess``
[-> ``mtp_step_paddle``], the same buffers, insertion, roles and draft sampling), with the head
in the MTP block's place and its own one-layer paged KV cache (layer index = the target's
``num_hidden_layers``; the head's own kv heads and head_dim). What differs:

* the target hidden states the head reads at its first substep: EAGLE-1 the target's
  final-normed last hidden state (as MTP); EAGLE-3 the streams entering the head's
  ``eagle_aux_hidden_state_layer_ids`` layers, which the target's forward kept
  (``Ernie4_5ForCausalLM.aux_hidden_states``, no extra pass), concatenated to ``[T, n*H]``
  (``eagle_get_hidden_states`` picks their rows as it picks the MTP's); the head fuses them with
  its ``fc``. Later substeps read the head's own output rows (``eagle_get_self_hidden_states``).
* EAGLE-3's draft vocabulary: the head's logits come back over the target vocabulary (the d2t
  map applied, -inf elsewhere), so the drafts written to the target's ``draft_tokens`` (and the
  draft probabilities of draft sampling) are target ids before verification.
"""

from __future__ import annotations

from .mtp import DraftModelProposer


class EagleProposer(DraftModelProposer):
    """Drafts with an `fd_mtp.model.eagle.EagleHead` (``speculative_config.method`` "eagle" or
    "eagle3", passed as ``mtp_model``: the draft-model argument of `DraftModelProposer`)."""

    METHODS = ("eagle", "eagle3")

    def __init__(self, speculative_config, mtp_model, input_batch, **kwargs):
        from ..model.eagle import EagleHead

        if mtp_model is not None and not isinstance(mtp_model, EagleHead):
            raise ValueError(
                f"EagleProposer: the draft model must be an EagleHead (fd_mtp.model.eagle), got "
                f"{type(mtp_model).__name__}"
            )
        method = getattr(speculative_config, "method", None)
        if mtp_model is not None and method in self.METHODS and mtp_model.method != method:
            raise ValueError(
                f"EagleProposer: speculative_config.method is {method!r} but the head is an "
                f"{mtp_model.method!r} head"
            )
        super().__init__(speculative_config, mtp_model, input_batch, **kwargs)

    def _target_hidden_states(self, full_hidden_states):
        if self.model.method == "eagle":
            return full_hidden_states
        main = self.model.main
        aux = main.aux_hidden_states
        if aux is None or tuple(main.aux_hidden_state_layers) != tuple(self.model.aux_layer_ids):
            raise RuntimeError(
                "EagleProposer: the target kept no aux hidden states for layers "
                f"{list(self.model.aux_layer_ids)} in its last forward (load the head with "
                "fd_mtp.model.eagle_io.load_eagle_head, which calls capture_aux_hidden_states)"
            )
        return self._paddle.concat(aux, axis=-1)

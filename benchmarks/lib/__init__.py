"""What every suite and probe shares: the server (:mod:`.server`), the corpus
(:mod:`.corpus`), the statistics (:mod:`.stats`), the results writer (:mod:`.report`), the
contenders compared against (:mod:`.contenders`), the synthetic vectors (:mod:`.vectors`)
and the JSONL history generator of the scale runs (:mod:`.jsonl`)."""

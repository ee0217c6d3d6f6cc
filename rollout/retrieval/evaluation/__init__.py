"""Retrieval measured without an agent, apart from the indexes it measures: recall@k, hit@k and MRR against gold
passages or answers (scores), passages ranked up to their documents (document_run), and TREC run and qrels
files scored as trec_eval scores them (trec). `python -m rollout.retrieval.evaluate` is the command."""

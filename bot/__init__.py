"""GraphMend's GitHub bot, shaped like reviewdog: findings → diff filter → renderer → client.

- ``review``: the review.json model written by ``graphmend pr``, validated against its schema;
- ``diff`` / ``diff_filter``: which lines of the pull request can carry a comment, and where
  each finding lies (in a hunk, in a changed file, outside the diff);
- ``render`` / ``markers``: every markdown body, with hidden markers that make re-runs idempotent;
- ``gate``: the merge verdict, recomputed from the findings;
- ``retry`` / ``github_client``: the only module importing PyGithub, and its retry policy;
- ``post``: the orchestration behind ``graphmend post``.

Nothing here imports torch or libcst: posting runs where the engine is not installed.
"""

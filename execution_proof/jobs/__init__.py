"""Background work on RQ: plain functions taking ids, enqueued by dotted path, JSON-serialised."""

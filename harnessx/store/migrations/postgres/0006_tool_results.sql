-- harnessx schema, version 6 (PostgreSQL): large tool results stored once.
-- A result longer than 16 KiB is written here once, when it arrives; the tool call's row and
-- the tool_result event carry a small reference to it instead of the text. The row of a tool
-- call gets a new version at every move of the call, which used to write such a result
-- again each time (and the conversation and the event held two more copies).

CREATE TABLE tool_results (
    execution_key text NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('raw', 'result')),
    run_id        text NOT NULL REFERENCES runs (id),
    body          text NOT NULL,
    PRIMARY KEY (execution_key, kind)
);

CREATE INDEX tool_results_run ON tool_results (run_id);

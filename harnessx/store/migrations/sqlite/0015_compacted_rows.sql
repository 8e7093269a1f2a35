-- harnessx schema, version 15 (SQLite): a run counts the event rows compaction removed
-- (PostgreSQL's schema 31, where dropping a day of events counts its rows from it; here it
-- keeps the two stores' runs alike, so that an archive of either restores into the other).

ALTER TABLE runs ADD COLUMN compacted_rows INTEGER NOT NULL DEFAULT 0;

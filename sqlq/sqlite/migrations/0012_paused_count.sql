-- 0012: the number of paused queues in the clock row, so that a claim probes
-- sqlq_paused only while some queue of the file is paused.
--
-- sqlq_clock.paused: how many rows sqlq_paused has, kept by the two triggers
-- below whatever statement adds or removes one.  The first statement of every
-- call reads the clock row anyway (open_call): it probes sqlq_paused for its
-- queue only when this is not 0, and a paused queue's claims then run no
-- statement; until then the claims do not look at sqlq_paused at all.

ALTER TABLE sqlq_clock ADD COLUMN paused INTEGER NOT NULL DEFAULT 0 CHECK (paused >= 0);

UPDATE sqlq_clock SET paused = (SELECT count(*) FROM sqlq_paused) WHERE id = 1;

CREATE TRIGGER sqlq_paused_added AFTER INSERT ON sqlq_paused
BEGIN
    UPDATE sqlq_clock SET paused = paused + 1 WHERE id = 1;
END;

CREATE TRIGGER sqlq_paused_removed AFTER DELETE ON sqlq_paused
BEGIN
    UPDATE sqlq_clock SET paused = paused - 1 WHERE id = 1;
END;

-- Fencing on PostgreSQL: two ways to make the database refuse a write
-- from a lock holder whose lease ended (docs/FENCING.md). Each row keeps
-- the highest fencing token that wrote it; a write with a lower one
-- changes nothing. Run with: psql -v ON_ERROR_STOP=1 -f postgres-fence.sql

-- 1. The conditional UPDATE: the check is the statement's own WHERE, so
--    it is as atomic as the write. A stale holder's UPDATE matches no row
--    ("UPDATE 0"): check the count, and stop if it is 0.
CREATE TABLE stock (
  item  text PRIMARY KEY,
  count integer NOT NULL,
  fence bigint NOT NULL DEFAULT 0
);
INSERT INTO stock (item, count) VALUES ('widget', 10);
-- As a lock holder with fencing token :fence (tollgate lock run gives it
-- to the command as $TOLLGATE_FENCE):
--   UPDATE stock SET count = count - 1, fence = :fence
--    WHERE item = 'widget' AND fence <= :fence;

-- 2. A trigger: every UPDATE of the table must carry a fence at least
--    the row's, or it fails (SQLSTATE 40001, so a client retries or
--    gives up as for a serialization failure). Writers cannot forget the
--    WHERE clause; they must still set the fence column.
CREATE TABLE ledger (
  account text PRIMARY KEY,
  balance bigint NOT NULL,
  fence   bigint NOT NULL DEFAULT 0
);
INSERT INTO ledger (account, balance) VALUES ('acme', 100);

CREATE FUNCTION refuse_stale_fence() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.fence < OLD.fence THEN
    RAISE EXCEPTION 'stale fence % (the row was written with %)', NEW.fence, OLD.fence
      USING ERRCODE = '40001';
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER ledger_fence BEFORE UPDATE ON ledger
  FOR EACH ROW EXECUTE FUNCTION refuse_stale_fence();
-- As a lock holder:
--   UPDATE ledger SET balance = balance - 10, fence = :fence WHERE account = 'acme';

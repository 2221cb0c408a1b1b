-- Fleet layouts: how many partitions a fleet relay spreads its accounts over. One row
-- per generation, insert-only; the current layout is the latest generation.
--
-- Without it N lived only on the command line: a member restarted with another N
-- resumed merged partitions from one old cursor and skipped the other's unfinished
-- events. Now a member with another N is refused, or (with --repartition, once no
-- other member runs) starts a new generation whose cursors begin at the lowest
-- cursor of the partitions they merge (README: "Fleet layout").
CREATE TABLE relay_fleet_layouts (
    relay      text        NOT NULL,
    generation bigint      NOT NULL CHECK (generation >= 1),
    partitions integer     NOT NULL CHECK (partitions >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (relay, generation)
);

CREATE TRIGGER relay_fleet_layouts_append_only BEFORE UPDATE OR DELETE ON relay_fleet_layouts
    FOR EACH ROW EXECUTE FUNCTION outbox_refuse_change('relay_fleet_layouts');
CREATE TRIGGER relay_fleet_layouts_no_truncate BEFORE TRUNCATE ON relay_fleet_layouts
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_refuse_change('relay_fleet_layouts');

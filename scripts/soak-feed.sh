# Sourced by the soak scripts (relay-soak.sh, hop2-soak.sh): the steady load they
# share and how they read a process's memory.

# Writes CHUNK payout lines over 1,000 accounts to FILE. The chunk is enqueued again
# and again: every line gets a new event id when enqueued.
#   write_soak_chunk FILE CHUNK
write_soak_chunk() {
    awk -v n="$2" 'BEGIN {
        for (i = 0; i < n; i++) {
            a = (i * 7) % 1000
            printf "{\"account\":\"merchants:%d\",\"postings\":[{\"source\":\"world\",\"destination\":\"merchants:%d:available\",\"amount\":%d,\"asset\":\"USD/2\"}],\"metadata\":{\"event_type\":\"soak\"}}\n", a, a, 1000 + i
        }
    }' > "$1"
}

# kB of a process's VmRSS and VmHWM ("-" once it has gone).
#   memory PID
memory() {
    awk '/^VmRSS/ {rss = $2} /^VmHWM/ {peak = $2} END {printf "%8d %8d", rss, peak}' "/proc/$1/status" 2>/dev/null || printf '%8s %8s' - -
}

# Enqueues FILE into DATABASE with the release `outbox` at $bin (one transaction each, 50 ms apart)
# for SECONDS, calling SAMPLE with the seconds elapsed every 10 s.
#   feed_for SECONDS DATABASE FILE SAMPLE
feed_for() {
    local start end next now
    start=$(date +%s)
    end=$((start + $1))
    next=$start
    while [ "$(date +%s)" -lt "$end" ]; do
        "$bin" enqueue --database "$2" --file "$3" >/dev/null
        now=$(date +%s)
        if [ "$now" -ge "$next" ]; then
            "$4" "$((now - start))"
            next=$((next + 10))
        fi
        sleep 0.05
    done
}

# validation table part
# A field nested 100,000 deep (200 KB, generated here): the message shows its kind and size, and
# never dumps it (dump() recurses).
deep=$(head -c 100000 /dev/zero | tr '\0' '[')$(head -c 100000 /dev/zero | tr '\0' ']')
printf '{"id": %s}\n' "$deep" > "$work/t.jsonl"
expect 2 "t\.jsonl:1: field 'id': found an array of 1 item; expected a non-empty string" -- validate "$work/t.jsonl"

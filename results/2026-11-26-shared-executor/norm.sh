#!/bin/sh
# strip wall-clock figures from synod check output
sed -E 's/, [0-9.]+ schedules\/s, [0-9]+ ops\/s//; s/ in [0-9.]+ s\)/)/'

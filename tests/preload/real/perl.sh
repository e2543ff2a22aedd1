#!/usr/bin/env bash
# Perl under the preload: a hash of a million keys, deletions, sorted digests,
# big string building and splitting.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname -- "$0")/lib.sh"

real_init perl perl
real_log "program: perl $(perl -e 'printf "%vd", $^V')"
real_check_binding perl -e 1

workload() {
    perl - <<'EOF'
use strict;
use warnings;
use Digest::SHA;

sub sorted_digest {
    my ($h) = @_;
    my $d = Digest::SHA->new(256);
    $d->add($_, "=", $h->{$_}, "\n") for sort keys %$h;
    return $d->hexdigest;
}

my %h;
for my $i (0 .. 999_999) {
    $h{ sprintf("key%07d", ($i * 7919) % 1_000_003) } = "v" . (($i * 31) % 100_000) x (1 + $i % 3);
}
printf "hash %d %s\n", scalar(keys %h), sorted_digest(\%h);

for my $i (0 .. 999_999) {
    delete $h{ sprintf("key%07d", ($i * 7919) % 1_000_003) } if $i % 3 == 0;
}
printf "after-delete %d %s\n", scalar(keys %h), sorted_digest(\%h);

my @vals = sort { length($a) <=> length($b) or $a cmp $b } values %h;
my $d = Digest::SHA->new(256);
$d->add("$_\n") for @vals;
printf "values %d %s\n", scalar(@vals), $d->hexdigest;

# Big strings: join, grow by appending, split back, regex over it.
my $big = join(",", @vals);
$big .= ("abcdefgh" x 1000) for 1 .. 2000;
printf "big %d %s\n", length($big), Digest::SHA::sha256_hex($big);
my @parts = split /,/, $big;
my $count = () = $big =~ /v1\d\d/g;
printf "split %d matches %d\n", scalar(@parts), $count;

# Nested structures.
my %nested;
for my $i (0 .. 199_999) {
    push @{ $nested{ $i % 1000 } }, [ $i, "x" x ($i % 50) ];
}
my $n = Digest::SHA->new(256);
for my $k (sort { $a <=> $b } keys %nested) {
    $n->add($k, ":", scalar(@{ $nested{$k} }), ":", join("|", map { "$_->[0]/$_->[1]" } @{ $nested{$k} }[0 .. 4]), "\n");
}
printf "nested %d %s\n", scalar(keys %nested), $n->hexdigest;
EOF
}

real_compare

set terminal pngcairo size 900,560 font 'sans,10'
set output "docs/results/netns/compare/throughput.png"
set style fill solid 0.7 border -1
set boxwidth 0.6
set xtics rotate by -25
set grid ytics
set yrange [0:*]
set bmargin 6
set ylabel 'tokens/s'
plot "docs/results/netns/compare/runs.dat" using 0:2:xtic(1) with boxes notitle
unset output
set terminal svg size 900,560 font 'sans,10'
set output "docs/results/netns/compare/throughput.svg"
set style fill solid 0.7 border -1
set boxwidth 0.6
set xtics rotate by -25
set grid ytics
set yrange [0:*]
set bmargin 6
set ylabel 'tokens/s'
plot "docs/results/netns/compare/runs.dat" using 0:2:xtic(1) with boxes notitle
unset output

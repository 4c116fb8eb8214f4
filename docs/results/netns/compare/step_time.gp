set terminal pngcairo size 900,560 font 'sans,10'
set output "docs/results/netns/compare/step_time.png"
set style fill solid 0.7 border -1
set boxwidth 0.6
set xtics rotate by -25
set grid ytics
set yrange [0:*]
set bmargin 6
set style data histograms
set style histogram clustered gap 1
set ylabel 'step time (s)'
set key top left
plot "docs/results/netns/compare/runs.dat" using 3:xtic(1) title 'measured', '' using 4 title 'predicted'
unset output
set terminal svg size 900,560 font 'sans,10'
set output "docs/results/netns/compare/step_time.svg"
set style fill solid 0.7 border -1
set boxwidth 0.6
set xtics rotate by -25
set grid ytics
set yrange [0:*]
set bmargin 6
set style data histograms
set style histogram clustered gap 1
set ylabel 'step time (s)'
set key top left
plot "docs/results/netns/compare/runs.dat" using 3:xtic(1) title 'measured', '' using 4 title 'predicted'
unset output
